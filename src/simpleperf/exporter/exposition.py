"""A probe's readings in Prometheus' exposition format, written by the Prometheus project's
Python client (prometheus_client): every series the exporter can give, defined once here."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from .probe import BUCKETS, Readings

# name: help. Gauges unless in HISTOGRAMS; every series also carries `target` and `module`.
METRICS = {
    "probe_success": "1 if the probe gave a whole result, else 0",
    "probe_duration_seconds": "how long the probe took, its wait for the server included",
    "simpleperf_probe_wait_seconds": "how long the probe waited for its target to be free of "
                                     "other throughput tests (the exporter's turns and the "
                                     "server's --queue)",
    "simpleperf_goodput_bits_per_second": "what the receiving end received, per second",
    "simpleperf_received_bytes": "bytes the receiving end received",
    "simpleperf_sent_bytes": "bytes the sending end sent",
    "simpleperf_tcp_retransmits": "TCP segments the sender retransmitted",
    "simpleperf_udp_jitter_seconds": "UDP jitter (RFC 3550's) the receiver measured",
    "simpleperf_udp_lost_packets": "UDP datagrams lost",
    "simpleperf_udp_packets": "UDP datagrams sent",
    "simpleperf_udp_loss_ratio": "UDP datagrams lost over those sent",
    "simpleperf_tcp_congestion_info": "the sender's TCP congestion control, as a label",
    "simpleperf_rpm": "round trips per minute over the trimmed mean of the probes' round "
                      "trips (load: idle before the test, loaded during it)",
    "simpleperf_responsiveness_rpm": "responsiveness as draft-ietf-ippm-responsiveness "
                                     "defines it (the rpm module)",
    "simpleperf_rtt_probes_sent": "round-trip probes sent (the rtt module)",
    "simpleperf_rtt_probes_answered": "round-trip probes answered (the rtt module)",
    "simpleperf_rtt_seconds": "round trips of probes on their own connection, idle or under "
                              "the test's load",
    "simpleperf_one_way_delay_seconds": "one-way delays the receiver measured (--trip-times; "
                                        "the two ends' clocks must agree)",
}
HISTOGRAMS = {"simpleperf_rtt_seconds", "simpleperf_one_way_delay_seconds"}


class _Probe:
    """A collector that yields one probe's readings."""

    def __init__(self, readings: Readings, target: str, module: str) -> None:
        self.readings, self.target, self.module = readings, target, module

    def collect(self) -> Iterator[Metric]:
        gauges: dict[str, GaugeMetricFamily] = {}
        histograms: dict[str, HistogramMetricFamily] = {}
        for (name, extra), value in sorted(self.readings.gauges.items()):
            labels = {"target": self.target, "module": self.module, **dict(extra)}
            gauge = gauges.setdefault(name, GaugeMetricFamily(
                name, METRICS[name], labels=list(labels)))
            gauge.add_metric(list(labels.values()), value)
        for (name, extra), histogram in sorted(self.readings.histograms.items()):
            labels = {"target": self.target, "module": self.module, **dict(extra)}
            family = histograms.setdefault(name, HistogramMetricFamily(
                name, METRICS[name], labels=list(labels)))
            buckets = [(f"{edge:g}", count) for edge, count in
                       zip(BUCKETS, histogram.buckets, strict=True)]
            family.add_metric(list(labels.values()),
                              buckets + [("+Inf", histogram.count)], histogram.total)
        yield from gauges.values()
        yield from histograms.values()


def page(readings: Readings, target: str, module: str, success: bool, duration: float,
         waited: float) -> bytes:
    """The /probe page: probe_success and probe_duration_seconds always; the readings only
    when the probe succeeded (a failed probe never half-reports)."""
    whole = Readings() if not success else Readings(dict(readings.gauges),
                                                    dict(readings.histograms))
    whole.gauge("probe_success", 1 if success else 0)
    whole.gauge("probe_duration_seconds", duration)
    whole.gauge("simpleperf_probe_wait_seconds", waited)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Probe(whole, target, module))
    return generate_latest(registry)
