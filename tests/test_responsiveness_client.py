"""`simpleperf -c URL --rpm`: draft-ietf-ippm-responsiveness over HTTP/2 with TLS against
any server of the draft's endpoints: Debian's nginx set up as Apple's responsiveness server
(a server no one here wrote) and a simpleperf server; the configuration URL and document
read as networkQuality and mach read them; every failure one line."""

from __future__ import annotations

import json
import signal
import socket
import tempfile

import pytest
from helpers import free_port, nginx_nq_server, run_simpleperf, start_server

from simpleperf.engine.responsiveness import CONNECT, FOREIGN, LOADED, TLS
from simpleperf.errors import SimpleperfError, UsageError
from simpleperf.responsiveness.config import (
    WELL_KNOWN,
    configuration_url,
    parse_configuration,
)
from simpleperf.stats import rpm

# The configuration URL and document ---------------------------------------------------------


def test_a_configuration_url_is_read_as_networkquality_reads_it():
    bare = configuration_url("https://nq.example")
    assert (bare.host, bare.port, bare.path, bare.tls) == ("nq.example", 443, WELL_KNOWN, True)
    assert str(bare) == "https://nq.example/.well-known/nq"
    given = configuration_url("https://[::1]:8443/config?x=1")
    assert (given.host, given.port, given.path) == ("::1", 8443, "/config?x=1")
    assert given.authority == "[::1]:8443"
    assert not configuration_url("http://h:8080").tls  # cleartext: h2c
    for bad in ("ftp://h/", "https://", "https://h:99999/", "https://h:x/"):
        with pytest.raises(UsageError):
            configuration_url(bad)


def test_the_drafts_keys_come_first_and_the_legacy_ones_serve_older_servers():
    where = configuration_url("https://h")
    draft = {"urls": {"small_download_url": "https://a/s", "small_https_download_url":
                      "https://old/s", "large_download_url": "https://a/l",
                      "upload_url": "https://a/u"}}
    found = parse_configuration(json.dumps(draft).encode(), where)
    assert (found.small.host, found.small.path, found.large.path) == ("a", "/s", "/l")
    legacy = {"urls": {"small_https_download_url": "https://b:8443/s",
                       "large_https_download_url": "https://b:8443/l",
                       "https_upload_url": "https://b:8443/u"}}
    found = parse_configuration(json.dumps(legacy).encode(), where)
    assert (found.upload.host, found.upload.port, found.upload.path) == ("b", 8443, "/u")
    for body, says in ((b"<html>", "not JSON"), (b"[]", "no \"urls\""),
                       (json.dumps({"urls": {"small_download_url": "https://a/s"}}).encode(),
                        "no large_download_url"),
                       (json.dumps({"urls": {**draft["urls"], "upload_url": "ftp://a"}}
                                   ).encode(), "upload_url")):
        with pytest.raises(SimpleperfError, match=says):
            parse_configuration(body, where)


@pytest.mark.parametrize("flags, says", [
    (["-c", "https://127.0.0.1:9/"], "measured with --rpm"),
    (["-c", "https://127.0.0.1:9/", "--rpm", "-p", "5201"], "-p/--port: the URL"),
    (["-c", "127.0.0.1", "--rpm", "--insecure"], "--insecure is for -c URL --rpm"),
    (["-c", "gopher://h/", "--rpm"], "not an https://"),
    (["-c", "https://127.0.0.1:9/", "--rpm", "-u"], "cannot be combined with -u"),
])
def test_what_a_url_cannot_be_given_is_one_line_and_exit_2(flags, says):
    done = run_simpleperf(*flags)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# Real servers on loopback -------------------------------------------------------------------

def url_run(url: str, *flags: str, timeout: float = 60):
    return run_simpleperf("-c", url, "--rpm", "--rpm-interval", "0.25", *flags,
                          timeout=timeout)


def check_document(document: dict, url: str, direction: str, tls: bool = True) -> dict:
    """The run's JSON: what ran, one-way goodput, and the draft's formula over its own
    trimmed means (TLS's round trip among the foreign probe's when there is TLS)."""
    start = document["start"]
    assert start["connecting_to"] == {"url": url}
    assert start["responsiveness"]["direction"] == direction
    intervals = document["intervals"]
    assert [i["connections"] for i in intervals[:3]] == [1, 2, 3]
    end = document["end"]["responsiveness"]
    assert end["goodput"] > 50e6, end  # loopback: far beyond this even through h2
    trimmed = end["trimmed_ms"]
    foreign_kinds = (CONNECT, TLS, FOREIGN) if tls else (CONNECT, FOREIGN)
    assert sorted(trimmed) == sorted((*foreign_kinds, LOADED)), trimmed
    foreign = sum(trimmed[kind] for kind in foreign_kinds) / len(foreign_kinds)
    assert end["foreign_rpm"] == pytest.approx(rpm(foreign))
    assert end["loaded_rpm"] == pytest.approx(rpm(trimmed[LOADED]))
    assert end["rpm"] == pytest.approx(rpm((foreign + trimmed[LOADED]) / 2))
    assert end["probes"][LOADED] >= 4 and end["probes"][FOREIGN] >= 4
    assert sorted(end["idle_ms"]) == sorted(foreign_kinds)
    assert all(value > 0 for value in end["idle_ms"].values())
    assert "error" not in document
    return end


@pytest.fixture(scope="module")
def nginx():
    with tempfile.TemporaryDirectory(prefix="simpleperf-nq-") as folder:
        process, port = nginx_nq_server(folder)
        yield process, port
        process.send_signal(signal.SIGTERM)
        process.wait(20)


@pytest.mark.loopback
@pytest.mark.parametrize("flags, direction", [(["-R"], "download"), ([], "upload")])
def test_our_client_measures_nginx_set_up_as_apples_server(nginx, flags, direction):
    process, port = nginx
    url = f"https://127.0.0.1:{port}/.well-known/nq"
    done = url_run(url, "--insecure", "-t", "3", "-J", *flags)
    assert done.returncode == 0, done.stderr
    check_document(json.loads(done.stdout), url, direction)
    assert process.poll() is None


@pytest.mark.loopback
def test_nginx_loaded_both_ways_and_in_text(nginx):
    _, port = nginx
    url = f"https://127.0.0.1:{port}/.well-known/nq"
    done = url_run(url, "--insecure", "-t", "3", "--bidir")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (f"Responsiveness (draft-ietf-ippm-responsiveness) to {url} (HTTP/2, "
                        "TLS unchecked: --insecure): upload and download at once, intervals "
                        "of 0.25 s, at most 3 s")
    goodput = next(line for line in lines if line.startswith("Goodput:"))
    assert "(up " in goodput and ", down " in goodput and "each way" in goodput
    assert any(line.startswith("  foreign ") and ", TLS " in line for line in lines)
    assert any(line.startswith("Idle: handshake ") for line in lines)


@pytest.mark.loopback
def test_our_client_measures_a_simpleperf_server_over_tls_and_h2c():
    live, port = start_server()
    try:
        url = f"https://127.0.0.1:{port}/.well-known/nq"
        done = url_run(url, "--insecure", "-t", "3", "-J", "-R")
        assert done.returncode == 0, done.stderr
        check_document(json.loads(done.stdout), url, "download")
        clear = f"http://127.0.0.1:{port}/.well-known/nq"  # h2c: no TLS round trip
        done = url_run(clear, "-t", "3", "-J")
        assert done.returncode == 0, done.stderr
        check_document(json.loads(done.stdout), clear, "upload", tls=False)
        # a certificate no authority signed is refused, in one line that says what to do
        done = url_run(url, "-t", "3")
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "not trusted" in done.stderr and "--insecure" in done.stderr
        assert any("Responsiveness load from" in line for line in live.lines)
        assert not any("Traceback" in line for line in live.lines)
    finally:
        live.close()


@pytest.mark.loopback
def test_servers_that_cannot_serve_the_run_are_one_line(nginx):
    _, port = nginx
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts, never answers
    try:
        cases = [
            (f"https://127.0.0.1:{port}/nothing", "answered 404"),
            (f"https://127.0.0.1:{free_port()}/", "Connection refused"),
            (f"https://127.0.0.1:{silent.getsockname()[1]}/", "no answer within"),
        ]
        for url, says in cases:
            done = url_run(url, "--insecure", "-t", "2", "--connect-timeout", "1000",
                           timeout=30)
            assert done.returncode == 1 and says in done.stderr, (url, done.stderr)
            assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    finally:
        silent.close()
