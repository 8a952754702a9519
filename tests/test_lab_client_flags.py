"""Client flags that need a real path between two namespaces (the lab's pair): a 1500-byte
MTU for --dont-fragment, a link that silently drops everything for --snd-timeout."""

from __future__ import annotations

import subprocess
import time

from helpers import SIMPLEPERF
from lab_helpers import Ready, in_node, lab, needs_lab

pytestmark = needs_lab


def test_dont_fragment_refuses_a_datagram_beyond_the_mtu_in_one_line():
    lab("up", "pair")
    server = Ready("h2", *SIMPLEPERF, "-s", "-p", "5201", ready="listening")
    try:
        client = [*SIMPLEPERF, "-c", "10.0.0.2", "-p", "5201", "-u", "-t", "1", "-l"]
        split = in_node("h1", *client, "3000", "-b", "5M")
        assert split.returncode == 0, split.stderr  # IP fragments carry it
        refused = in_node("h1", *client, "3000", "-b", "5M", "--dont-fragment")
        assert refused.returncode == 1
        assert refused.stderr == ("simpleperf: error: a 3000-byte datagram does not fit the "
                                  "path's MTU of 1500 bytes, and --dont-fragment forbids "
                                  "splitting it: -l 1472 or less fits\n"), refused.stderr
        fits = in_node("h1", *client, "1472", "-b", "5M", "--dont-fragment")
        assert fits.returncode == 0, fits.stderr
    finally:
        server.stop()
        lab("down", "pair")


def test_snd_timeout_ends_a_test_whose_data_goes_unacknowledged():
    lab("up", "pair", "--rate", "100M")  # shaped: its loss can be set while it runs
    server = Ready("h2", *SIMPLEPERF, "-s", "-p", "5201", ready="listening")
    try:
        client = subprocess.Popen(["ip", "netns", "exec", "h1", *SIMPLEPERF, "-c", "10.0.0.2",
                                   "-p", "5201", "-t", "30", "--snd-timeout", "1000",
                                   "--native", "-i", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        lab("link", "h1-h2", "set", "--loss", "100%")  # silent: carrier stays up
        cut = time.monotonic()
        _, err = client.communicate(timeout=30)
        took = time.monotonic() - cut
        assert client.returncode == 1 and "timed out" in err, err
        assert len(err.strip().splitlines()) == 1 and took < 10, (took, err)
    finally:
        server.stop()
        lab("down", "pair")
