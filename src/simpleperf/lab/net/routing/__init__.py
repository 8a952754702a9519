"""Routing daemons for routed topologies: FRR's configuration written from the model
(config), the daemons started per router namespace (daemons), the routes they installed read
back from the kernel (tables)."""
