"""`simpleperf exporter`: measurements for Prometheus. On top of the tool, as the lab is: it
runs the tool's client and reads its JSON; the tool never needs it."""
