"""The moto launcher of the s3 driver's emulator (tiered_driver_s3.moto_atomic): two
conditional creates racing for one key, with moto's check-then-write window held open."""

from __future__ import annotations

import threading
import time
import uuid

import boto3
import botocore.exceptions
from botocore.config import Config
import pytest
from moto.s3.models import S3Backend
from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer

from tiered_conformance.emulator import free_port
from tiered_driver_s3 import moto_atomic
from tiered_driver_s3.emulator import FAKE_CREDENTIALS, MotoServer


def race_two_creates(monkeypatch) -> list[int]:
    """Which of two ``PutObject`` calls with ``If-None-Match: *`` for one new key got past the
    precondition, on an in-process moto whose existence check takes 0.3 s (the window two
    threads can meet in). Each client sends once (no retry: a retried loser would see the
    winner's object). Past the check means stored, or -- when the two writes collide inside
    moto, which happens under load -- a 500 from moto's write; a loser gets 412."""
    checked = S3Backend.get_object

    def slow_check(self, *args, **kwargs):
        found = checked(self, *args, **kwargs)
        time.sleep(0.3)
        return found

    monkeypatch.setattr(S3Backend, "get_object", slow_check)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port())
    server.start()
    try:
        url = "http://127.0.0.1:%d" % server.get_host_and_port()[1]
        once = Config(retries={"total_max_attempts": 1, "mode": "standard"})
        clients = [boto3.client("s3", endpoint_url=url, aws_access_key_id=FAKE_CREDENTIALS["key"],
                                aws_secret_access_key=FAKE_CREDENTIALS["secret"], region_name="us-east-1",
                                config=once)
                   for _ in range(2)]
        clients[0].create_bucket(Bucket="race")
        key, won, start = f"k-{uuid.uuid4().hex}", [], threading.Barrier(2)

        def create(i: int) -> None:
            start.wait()
            try:
                clients[i].put_object(Bucket="race", Key=key, Body=b"x" * (1 + i), IfNoneMatch="*")
                won.append(i)
            except botocore.exceptions.ClientError as exc:
                status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
                if status == 500:  # past the check, then moto's write collided with the other one
                    won.append(i)
                else:
                    assert exc.response["Error"]["Code"] == "PreconditionFailed", exc.response

        threads = [threading.Thread(target=create, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return won
    finally:
        server.stop()


@pytest.fixture
def plain_handlers(monkeypatch):
    """moto's own handlers back in place after the test (the launcher patches the class)."""
    for name in moto_atomic._HANDLERS:
        monkeypatch.setattr(S3Response, name, getattr(S3Response, name))


def test_without_the_lock_both_racing_creates_succeed(monkeypatch, plain_handlers):
    assert len(race_two_creates(monkeypatch)) == 2  # moto's gap, which the launcher closes


def test_with_the_lock_exactly_one_racing_create_succeeds(monkeypatch, plain_handlers):
    moto_atomic.make_s3_requests_atomic()
    moto_atomic.make_s3_requests_atomic()  # idempotent: one lock, not two wrappers
    assert getattr(S3Response._key_response, "__wrapped__").__name__ == "_key_response"
    assert not hasattr(S3Response._key_response.__wrapped__, "__wrapped__")
    assert len(race_two_creates(monkeypatch)) == 1


def test_a_moto_without_the_handlers_is_refused(monkeypatch, plain_handlers):
    monkeypatch.delattr(S3Response, "_key_response")
    with pytest.raises(RuntimeError, match="_key_response"):
        moto_atomic.make_s3_requests_atomic()


def test_the_emulator_runs_the_launcher(tmp_path):
    assert MotoServer(tmp_path / "moto").command()[1:3] == ["-m", "tiered_driver_s3.moto_atomic"]


def test_moto_lists_its_modules_once(monkeypatch):
    """The launcher reads moto's package folder once: a request no longer lists and stats it."""
    from moto import backends

    monkeypatch.setattr(backends, "list_of_moto_modules", backends.list_of_moto_modules)  # undone after
    expected = list(backends.list_of_moto_modules())
    moto_atomic.list_moto_modules_once()
    moto_atomic.list_moto_modules_once()  # idempotent

    def no_listing(path):
        raise AssertionError(f"listed {path} again")

    monkeypatch.setattr("os.listdir", no_listing)
    assert "s3" in expected
    assert list(backends.list_of_moto_modules()) == expected
    assert list(backends.list_of_moto_modules()) == expected  # not a spent iterator
