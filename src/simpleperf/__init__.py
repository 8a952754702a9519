"""simpleperf: network throughput measurement, classic Simpleperf grown into an iperf-class tool."""

__version__ = "0.1.0"
