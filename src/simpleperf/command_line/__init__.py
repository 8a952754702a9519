"""The command line: flags to options, every bad value one line. cli.py builds the parser
and reads it; the families of flags beside it (latency_flags.py: iperf2's --trip-times,
--histograms, --isochronous; iperf2_flags.py and iperf3_flags.py: the other tools' flags a
script may type) add and read their own; flag_values.py reads and checks one value."""
