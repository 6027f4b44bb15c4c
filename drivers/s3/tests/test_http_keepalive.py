"""The emulator's keep-alive request handler (tiered_driver_s3.http_keepalive), against the
real moto server the tests use: connections stay open between requests, every kind of
request body is read whole, and a client dying mid-request disturbs nobody else."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time

import boto3
import pytest

from tiered_driver_s3.emulator import EMULATOR_REGION, FAKE_CREDENTIALS, MotoServer


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        server.create_bucket("keep")
        yield server


def _connect(server: MotoServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)


@pytest.fixture
def conn(moto):
    """A client connection to the module's server, closed after the test."""
    connection = _connect(moto)
    yield connection
    connection.close()


def _object(server: MotoServer, key: str) -> bytes:
    """The object's bytes, through a signed client (moto refuses an unsigned GET)."""
    client = boto3.client("s3", endpoint_url=server.url, region_name=EMULATOR_REGION,
                          aws_access_key_id=FAKE_CREDENTIALS["key"], aws_secret_access_key=FAKE_CREDENTIALS["secret"])
    return client.get_object(Bucket="keep", Key=key)["Body"].read()


def _listing(conn: http.client.HTTPConnection, prefix: str) -> bytes:
    conn.request("GET", f"/keep?list-type=2&prefix={prefix}")  # unsigned: moto answers a listing
    answer = conn.getresponse()
    assert answer.status == 200
    return answer.read()


def test_one_connection_carries_many_requests(conn):
    """moto's development server closed the connection after every answer."""
    for i in range(5):
        conn.request("PUT", f"/keep/many/k{i}", body=b"x" * (i + 1))
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        answer.read()
        assert (answer.getheader("Connection") or "").lower() != "close"
        if i == 0:
            sock = conn.sock
        assert conn.sock is sock is not None  # the same socket, still open
    listing = _listing(conn, "many/")
    assert all(f"<Key>many/k{i}</Key>".encode() in listing for i in range(5)), listing
    assert conn.sock is sock


def test_head_keeps_the_applications_length_and_sends_no_body(moto, conn):
    """A HEAD answer's Content-Length is the body a GET would carry; no body follows, so the
    next answer on the connection starts where it should."""
    conn.request("GET", "/moto-api/")
    page = conn.getresponse().read()
    assert page
    conn.request("HEAD", "/moto-api/")
    answer = conn.getresponse()
    assert answer.status == 200 and answer.getheader("Content-Length") == str(len(page))
    assert answer.read() == b""
    conn.request("PUT", "/keep/head/obj", body=b"y" * 1234)
    assert conn.getresponse().status == 200
    assert _object(moto, "head/obj") == b"y" * 1234


def test_chunked_and_expect_continue_bodies_are_read_whole(moto, conn):
    conn.request("PUT", "/keep/chunked/obj", body=iter([b"abc", b"", b"defgh", b"i" * 5000]),
                 encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
    answer = conn.getresponse()
    assert answer.status == 200, answer.read()
    answer.read()
    conn.request("PUT", "/keep/expect/obj", body=b"z" * 3000, headers={"Expect": "100-continue"})
    answer = conn.getresponse()  # http.client skips the interim 100 answer
    assert answer.status == 200, answer.read()
    answer.read()
    assert _object(moto, "chunked/obj") == b"abcdefgh" + b"i" * 5000
    assert _object(moto, "expect/obj") == b"z" * 3000


def test_connection_close_is_honoured(conn):
    conn.request("GET", "/moto-api/", headers={"Connection": "close"})
    answer = conn.getresponse()
    answer.read()
    assert answer.getheader("Connection", "").lower() == "close"
    assert answer.will_close


def test_a_client_killed_mid_body_leaves_other_connections_served(moto):
    """The crash tests kill children mid-request: the server must go on answering everyone
    else, and must not store the partial body."""
    partial = (b"PUT /keep/torn/obj HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"
               + b"p" * 1000)
    child = subprocess.Popen([sys.executable, "-c", (
        "import socket, sys, time\n"
        f"s = socket.create_connection(('127.0.0.1', {moto.port}))\n"
        f"s.sendall({partial!r})\n"
        "print('sent', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"sent"
        idle = _connect(moto)  # a kept-open connection that is idle while the other one dies
        idle.request("GET", "/moto-api/")
        idle.getresponse().read()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        for _ in range(3):
            conn = _connect(moto)
            conn.request("GET", "/moto-api/")
            assert conn.getresponse().status == 200
            conn.close()
        idle.request("GET", "/moto-api/")
        assert idle.getresponse().status == 200
        idle.close()
        check = _connect(moto)
        assert b"torn/obj" not in _listing(check, "torn/")
        check.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sigterm_stops_the_server_at_once_with_a_connection_open_and_it_restarts(tmp_path):
    """SIGTERM ends it by itself (exit status 0, not the SIGKILL ``stop`` falls back to after
    10 s), and a restart binds the same port again."""
    server = MotoServer(tmp_path / "moto").start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port))  # idle, kept open
        process, began = server.process, time.monotonic()
        server.stop()
        assert time.monotonic() - began < 5
        assert process.returncode == 0
        sock.close()
        server.restart()
        conn = _connect(server)
        conn.request("GET", "/moto-api/")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.close()
