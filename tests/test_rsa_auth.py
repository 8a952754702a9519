"""iperf3's RSA authentication (rsa_auth.py), both ways, against iperf3 3.12 (PKCS #1 v1.5
padding, as iperf3 before 3.17 has it) and 3.21 (OAEP): a right user is served, a wrong
password, a missing token and a skewed clock are refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from helpers import IPERF3_BINARIES, free_port, run_simpleperf, start_server

from simpleperf import rsa_auth
from simpleperf.protocol import iperf3


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """An RSA key pair as iperf3's docs make them (PEM), and a users file for mario."""
    folder = tmp_path_factory.mktemp("rsa")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (folder / "private.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    (folder / "public.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (folder / "users.csv").write_text("# iperf3's format\n"
                                      + rsa_auth.users_line("mario", "rossi") + "\n")
    return folder


def _authorizer(keys, pkcs1=False, skew=10):
    return rsa_auth.Authorizer(rsa_auth.load_private_key(str(keys / "private.pem")),
                               str(keys / "users.csv"), skew, pkcs1)


@pytest.mark.parametrize("pkcs1", [False, True])
def test_tokens_are_read_back_and_judged(keys, pkcs1):
    public = rsa_auth.load_public_key(str(keys / "public.pem"))
    check = _authorizer(keys, pkcs1)
    assert check.refusal(rsa_auth.make_token("mario", "rossi", public, pkcs1)) is None
    assert "not authorized" in check.refusal(rsa_auth.make_token("mario", "bianchi", public,
                                                                 pkcs1))
    assert "not authorized" in check.refusal(rsa_auth.make_token("luigi", "rossi", public,
                                                                 pkcs1))
    now = time.time()
    early = rsa_auth.make_token("mario", "rossi", public, pkcs1, now=now - 60)
    assert "60 s behind" in check.refusal(early, now=now)  # the server's clock, when read
    # The other padding: refused. Decrypting it as PKCS#1 v1.5 cannot always fail (OpenSSL
    # 3.2 and later reject a bad padding implicitly, returning a synthetic message, as a
    # defence against Bleichenbacher-style timing): about 1 in 120 of those decode as text,
    # which is then not in iperf3's form.
    wrong = check.refusal(rsa_auth.make_token("mario", "rossi", public, not pkcs1))
    assert "cannot read" in wrong or (pkcs1 and "not in iperf3's form" in wrong), wrong
    for junk in (None, "", "!!!", "QUJD", "A" * 5000):
        assert check.refusal(junk) is not None


def test_half_a_configuration_is_a_usage_error(keys):
    done = run_simpleperf("-s", "--rsa-private-key-path", str(keys / "private.pem"))
    assert done.returncode == 2 and "go together" in done.stderr
    done = run_simpleperf("-c", "127.0.0.1", "--username", "mario")
    assert done.returncode == 2 and "go together" in done.stderr
    done = run_simpleperf("-c", "127.0.0.1", "--username", "mario", "--rsa-public-key-path",
                          str(keys / "users.csv"))
    assert done.returncode == 2 and "not a PEM RSA public key" in done.stderr


def _iperf3(version, *args, password="rossi"):
    env = {**os.environ, rsa_auth.PASSWORD_ENV: password}
    return subprocess.run([IPERF3_BINARIES[version], "-c", "127.0.0.1", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.iperf3
@pytest.mark.loopback
@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_iperf3_clients_authenticate_to_our_server(keys, version):
    pkcs1 = ["--use-pkcs1-padding"] if version == "3.12" else []
    live, port = start_server("--rsa-private-key-path", str(keys / "private.pem"),
                              "--authorized-users-path", str(keys / "users.csv"), *pkcs1)
    try:
        login = ["-p", str(port), "-t", "1", "--username", "mario", "--rsa-public-key-path",
                 str(keys / "public.pem")]
        done = _iperf3(version, *login, "-J")
        assert done.returncode == 0, done.stdout
        assert json.loads(done.stdout)["end"]["sum_received"]["bytes"] > 0
        wrong = _iperf3(version, *login, password="bianchi")
        assert wrong.returncode != 0
        assert "test authorization failed" in wrong.stdout + wrong.stderr
        none = _iperf3(version, "-p", str(port), "-t", "1")
        assert "test authorization failed" in none.stdout + none.stderr
        live.wait_for(lambda lines: sum("authentication failed" in line
                                        for line in lines) >= 2)
        native = run_simpleperf("-c", "127.0.0.1", "-p", str(port), "-t", "1", "--native")
        assert native.returncode == 1 and "RSA authentication" in native.stderr
    finally:
        live.close()


@pytest.mark.iperf3
@pytest.mark.loopback
def test_a_skewed_clock_is_refused_as_iperf3_refuses_it(keys):
    live, port = start_server("--rsa-private-key-path", str(keys / "private.pem"),
                              "--authorized-users-path", str(keys / "users.csv"),
                              "--time-skew-threshold", "5")
    try:
        token = rsa_auth.make_token("mario", "rossi", rsa_auth.load_public_key(
            str(keys / "public.pem")), now=time.time() + 30)
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(iperf3.make_cookie())
            assert sock.recv(1) == iperf3.state(iperf3.PARAM_EXCHANGE)
            sock.sendall(iperf3.encode_json({"tcp": True, "time": 1, "parallel": 1,
                                             "authtoken": token}))
            sock.settimeout(10)
            reply = sock.recv(16)
        assert reply[:1] == iperf3.state(iperf3.SERVER_ERROR)
        live.wait_for(lambda lines: any("30 s ahead of the server's" in line
                                        for line in lines))
    finally:
        live.close()


@pytest.mark.iperf3
@pytest.mark.loopback
@pytest.mark.parametrize("version", ["3.12", "3.21"])
def test_our_client_authenticates_to_iperf3_servers(keys, version):
    port = free_port()
    server = subprocess.Popen([IPERF3_BINARIES[version], "-s", "-p", str(port),
                               "--rsa-private-key-path", str(keys / "private.pem"),
                               "--authorized-users-path", str(keys / "users.csv")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pkcs1 = ["--use-pkcs1-padding"] if version == "3.12" else []
    try:
        time.sleep(1)
        env = {rsa_auth.PASSWORD_ENV: "rossi"}
        login = ["-c", "127.0.0.1", "-p", str(port), "-t", "1", "--username", "mario",
                 "--rsa-public-key-path", str(keys / "public.pem"), *pkcs1]
        done = _simpleperf(env, *login, "-J")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["start"]["protocol"] == "iperf3"
        wrong = _simpleperf({rsa_auth.PASSWORD_ENV: "bianchi"}, *login)
        assert wrong.returncode == 1
        assert wrong.stderr.count("\n") == 1 and "authentication" in wrong.stderr
    finally:
        server.kill()
        server.wait(5)


def _simpleperf(env, *args):
    from helpers import SIMPLEPERF
    return subprocess.run(SIMPLEPERF + list(args), capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


@pytest.mark.loopback
def test_username_against_a_simpleperf_server_is_one_line(keys):
    live, port = start_server()
    try:
        done = _simpleperf({rsa_auth.PASSWORD_ENV: "rossi"}, "-c", "127.0.0.1", "-p",
                           str(port), "-t", "1", "--username", "mario",
                           "--rsa-public-key-path", str(keys / "public.pem"))
        assert done.returncode == 1
        assert "iperf3's RSA authentication, for iperf3 servers" in done.stderr
    finally:
        live.close()
