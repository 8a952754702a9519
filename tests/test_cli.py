"""Command-line validation: one clear line, exit status 2, never a traceback."""

from __future__ import annotations

import re

import pytest
from helpers import run_simpleperf

from simpleperf.command_line.cli import ClientOptions, ServerOptions, UsageError, parse_args

BAD_INVOCATIONS = [
    # (arguments, the flag the message must name)
    (["-s", "-p", "80"], "-p/--port"),
    (["-s", "-p", "65536"], "-p/--port"),
    (["-s", "-p", "1023"], "-p/--port"),
    (["-c", "-p", "abc"], "-p/--port"),
    (["-c", "-p", ""], "-p/--port"),
    (["-s", "-f", "GB"], "-f/--format"),
    (["-c", "-f", "mbps"], "-f/--format"),
    (["-s", "-b", "10.0.0.256"], "-b/--bind"),
    (["-s", "-b", "localhost"], "-b/--bind"),
    (["-c", "-I", "10.0.0.300"], "-I/--serverip"),
    (["-c", "-I", "bad host!"], "-I/--serverip"),
    (["-c", "1.2.3"], "-c/--client"),
    (["-c", "-t", "0"], "-t/--time"),
    (["-c", "-t", "-5"], "-t/--time"),
    (["-c", "-t", "ten"], "-t/--time"),
    (["-c", "-t", "nan"], "-t/--time"),
    (["-c", "-t", "inf"], "-t/--time"),
    (["-c", "-i", "0"], "-i/--interval"),
    (["-c", "-i", "x"], "-i/--interval"),
    (["-c", "-P", "0"], "-P/--parallel"),
    (["-c", "-P", "129"], "-P/--parallel"),
    (["-c", "-P", "2.5"], "-P/--parallel"),
    (["-c", "-n", "0MB"], "-n/--num"),
    (["-c", "-n", "10XB"], "-n/--num"),
    (["-c", "-n", "-3MB"], "-n/--num"),
    (["-c", "-n", "10MB", "-t", "5"], "-n/--num"),
    (["-c", "-l", "0"], "-l/--len"),
    (["-c", "-l", "100GB"], "-l/--len"),
    (["-c", "-w", "1"], "-w/--window"),
    (["-s", "-w", "lots"], "-w/--window"),
    (["-s", "-c"], "-s/--server"),
    (["-s", "-t", "5"], "-t/--time"),
    (["-s", "-P", "2"], "-P/--parallel"),
    (["-c", "-b", "127.0.0.1"], "-b/--bitrate"),
    (["-c", "-u", "-b", "fast"], "-b/--bitrate"),
    (["-c", "--bitrate=-5M"], "-b/--bitrate"),
    (["-c", "-u", "-l", "10"], "-l/--len"),
    (["-c", "-u", "-l", "70000"], "-l/--len"),
    (["-c", "-O", "-1"], "-O/--omit"),
    (["-c", "-R", "--bidir"], "-R/--reverse"),
    (["-c", "-J", "--json-stream"], "-J/--json"),
    (["-c", "--probe"], "--probe"),
    (["-c", "--count", "5"], "--count"),
    (["-c", "--rtt", "--count", "0"], "--count"),
    (["-c", "-M", "10"], "-M/--mss"),
    (["-c", "-4", "-6"], "-4/--ipv4"),
    (["-c", "-u", "--probe", "--loss-threshold", "100"], "--loss-threshold"),
    (["-c", "--rtt-interval", "0"], "--rtt-interval"),
    (["-c", "-B", "nowhere"], "-B/--bind-address"),
    (["-s", "-u"], "-u/--udp"),
    (["-s", "-R"], "-R/--reverse"),
    (["-s", "--max-clients", "0"], "--max-clients"),
    (["-s", "--max-parallel", "500"], "--max-parallel"),
    (["-s", "--max-duration", "-1"], "--max-duration"),
    (["-s", "--auth-secret-file", "/nonexistent/secret"], "--auth-secret-file"),
    (["-s", "--auth-secret-file", "/dev/zero"], "--auth-secret-file"),  # read, but bounded
    (["-s", "--allow-classic"], "--allow-classic"),
    (["-s", "-F", "/tmp"], "-F/--file"),  # a directory
    (["-s", "-F", "/nonexistent/folder/file"], "-F/--file"),  # no secret to allow them despite
    (["-c", "--allow-classic"], "--allow-classic"),
    (["-c", "--max-clients", "3"], "--max-clients"),
    (["-s", "--frobnicate"], "--frobnicate"),
    (["-s", "extra"], "extra"),
    # Hostile or absurd values: each one line, exit 2, before anything connects.
    (["-c", "-n", "99999999999999999999999999999999MB"], "-n/--num"),
    (["-c", "-t", "999999999", "--native"], "-t/--time"),
    (["-c", "-t", "999999999"], "-t/--time"),
    (["-c", "", "-t", "1"], "-c/--client"),
    (["-c", "-I", ""], "-I/--serverip"),
    (["-c", "localhost\n"], "-c/--client"),
    (["-c", "-I", "local\thost"], "-I/--serverip"),
    (["-c", "--rtt-interval", "1e-9"], "--rtt-interval"),
    (["-c", "-i", "1e-9"], "-i/--interval"),
    (["-s", "--max-duration", "1e12"], "--max-duration"),
]


@pytest.mark.parametrize("args,flag", BAD_INVOCATIONS)
def test_bad_value_is_one_line_naming_the_flag(args, flag):
    with pytest.raises(UsageError) as caught:
        parse_args(args)
    assert flag in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("args,flag", BAD_INVOCATIONS[::4])
def test_bad_value_exits_2_with_one_stderr_line(args, flag):
    import json

    done = run_simpleperf(*args)
    assert done.returncode == 2
    if "-J" in args:  # the same error, as the one JSON document scripts read
        assert json.loads(done.stdout)["error"] in done.stderr
    else:
        assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert flag in lines[0]
    assert "Traceback" not in done.stderr


def test_neither_mode_prints_the_classic_line():
    done = run_simpleperf()
    assert done.returncode != 0
    assert done.stderr.strip() == "Error: you must run either in server or client mode"
    done = run_simpleperf("-p", "9000")
    assert done.stderr.strip() == "Error: you must run either in server or client mode"


def test_defaults():
    server = parse_args(["-s"])
    assert server == ServerOptions(bind=None, port=8088, unit="MB", length=256 * 1024)
    client = parse_args(["-c"])
    assert isinstance(client, ClientOptions)
    assert (client.host, client.port, client.unit, client.test.duration, client.test.num_bytes,
            client.interval, client.test.parallel) == ("127.0.0.1", 8088, "", 25.0, None, None, 1)
    # No -f: classic tables in MB (classic_unit), other tests scaled as iperf3 scales them.


def test_long_flags_and_units():
    client = parse_args(["--client", "--serverip", "10.0.5.2", "--port", "9000",
                         "--format", "KB", "--num", "10MB", "--interval", "0.5",
                         "--parallel", "5", "--len", "64K"])
    assert isinstance(client, ClientOptions)
    assert client.host == "10.0.5.2" and client.port == 9000 and client.unit == "KB"
    assert client.test.num_bytes == 10_000_000 and client.interval == 0.5
    assert client.test.parallel == 5 and client.test.length == 64_000
    assert parse_args(["-c", "-w", "64K"]).test.window == 64_000
    assert parse_args(["-s", "--window", "1MB"]).window == 1_000_000


def test_host_given_to_c_directly_and_names_and_ipv6():
    assert parse_args(["-c", "10.0.0.2"]).host == "10.0.0.2"
    assert parse_args(["-c", "-I", "::1"]).host == "::1"
    assert parse_args(["-c", "localhost"]).host == "localhost"
    with pytest.raises(UsageError):
        parse_args(["-c", "10.0.0.2", "-I", "10.0.0.3"])


def test_server_bind_accepts_ipv4_and_ipv6():
    assert parse_args(["-s", "-b", "10.0.5.2"]).bind == "10.0.5.2"
    assert parse_args(["-s", "--bind", "::1"]).bind == "::1"


def test_help_exits_0():
    done = run_simpleperf("--help")
    assert done.returncode == 0
    for flag in ("-s", "-c", "-b", "-I", "-p", "-f", "-t", "-n", "-i", "-P", "-l", "-w"):
        assert re.search(rf"^\s+{flag}\b", done.stdout, re.M), flag


@pytest.mark.parametrize("args,message", [
    (["-t", "-1"], "-t/--time must be a number of seconds greater than 0"),
    (["-t", "-1.5"], "-t/--time must be a number of seconds greater than 0"),
    (["-i", "-2"], "-i/--interval must be a number of seconds at least"),
    (["-n", "-5MB"], "-n/--num must be an amount"),
    (["-P", "-3"], "-P/--parallel must be an integer from 1 to"),
])
def test_a_negative_value_gets_its_own_range_error(args, message):
    """argparse takes `-1` for an option (there are -4 and -6): the value must still reach
    its own check instead of 'expected one argument'."""
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_args(["-c", "-I", "127.0.0.1", *args])


def test_parallel_help_and_error_name_the_same_range():
    from simpleperf.command_line.cli import build_parser
    from simpleperf.description.options import MAX_PARALLEL

    help_text = " ".join(build_parser().format_help().split())
    assert f"parallel connections, 1..{MAX_PARALLEL}" in help_text
    with pytest.raises(UsageError, match=f"from 1 to {MAX_PARALLEL}"):
        parse_args(["-c", "-P", str(MAX_PARALLEL + 1)])


@pytest.mark.parametrize("args,status", [
    (["-p", "9"], 2),  # a usage error
    (["-t", "1"], 1),  # nothing listens on the port
])
def test_a_json_run_that_fails_still_writes_one_document(args, status):
    import json
    import socket

    with socket.socket() as reserved:  # bound, never listening: connecting is refused
        reserved.bind(("127.0.0.1", 0))
        port = str(reserved.getsockname()[1])
        done = run_simpleperf("-c", "-I", "127.0.0.1", "-p", port, *args, "-J")
    assert done.returncode == status
    document = json.loads(done.stdout)
    assert document["error"] and document["intervals"] == [] and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1


def test_the_package_says_who_and_what_it_is():
    from pathlib import Path

    import tomllib

    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    assert project["authors"] and len(project["classifiers"]) >= 5
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]


def test_help_names_the_lab_with_examples():
    from simpleperf.command_line.cli import build_parser

    text = build_parser().format_help()
    assert "examples:" in text and "simpleperf lab run portfolio" in text
    assert "simpleperf lab list" in text


def test_every_lab_command_and_option_says_what_it_does():
    import argparse

    from simpleperf.lab.commands import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    described = {choice.dest for choice in commands._choices_actions if choice.help}
    assert described == set(commands.choices)
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"lab {name}: {action.dest} has no help"


def test_lab_list_names_every_shipped_topology_and_experiment():
    from simpleperf.lab.commands import shipped
    from simpleperf.lab.model import experiment, topology

    listing = shipped()
    for folder in (topology.DATA_DIR, experiment.DATA_DIR):
        for path in folder.glob("*.toml"):
            line = next(line for line in listing.splitlines() if line.split()[0] == path.stem)
            assert len(line.split()) > 2  # a name, then what it is
    assert "pair" in listing.split()


def test_v_is_the_version_with_the_kernel_features_and_V_is_verbose():
    done = run_simpleperf("-v")
    assert done.returncode == 0 and done.stdout.startswith("simpleperf ")
    for feature in ("UDP GSO", "UDP GRO", "TCP_INFO", "sendfile"):
        assert re.search(rf"^  {feature}.* (yes|no)", done.stdout, re.M), feature
    assert run_simpleperf("--version").stdout == done.stdout
    verbose = parse_args(["-c", "-V"])
    assert isinstance(verbose, ClientOptions) and verbose.extended  # as iperf3's -V: more
    assert not parse_args(["-c"]).extended


def test_zerocopy_is_a_client_flag_that_needs_more_than_classic():
    options = parse_args(["-c", "-Z"])
    assert isinstance(options, ClientOptions) and options.test.zerocopy and options.needs_native
    done = run_simpleperf("-s", "-Z")
    assert done.returncode == 2 and "-Z/--zerocopy is a client option" in done.stderr


@pytest.mark.parametrize("args,module", [
    (["-c", "--connect-only"], "connect_times"), (["-c", "--rpm"], "native.responsiveness"),
    (["-c", "--rtt"], "native.round_trips"), (["-c", "-u", "--probe"], "native.rate_probe"),
    (["-c", "--bounceback"], "iperf2.bounceback"), (["-c", "--iperf2"], "iperf2.client"),
    (["-c", "--iperf3"], "iperf3.client"), (["-c", "-u"], "native.client"),
    (["-c"], "classic.client"),
])
def test_each_client_mode_is_chosen_from_the_table_and_its_driver_runs_tests(args, module):
    import importlib

    from simpleperf.main import CLIENT_MODES

    options = parse_args(args)
    assert isinstance(options, ClientOptions)
    chosen = next(name for selects, name in CLIENT_MODES if selects(options))
    assert chosen == module
    assert callable(importlib.import_module(f"simpleperf.{chosen}").run)
