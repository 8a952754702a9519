"""The server: port.py listens on one port, tells each connection's protocol apart and
hands it to that protocol's service (classic/, native/, iperf3/, iperf2/); refuser.py
refuses what is over the limits in the protocol's own words; service.py runs the server
as a service (--logfile, --pidfile, -D)."""
