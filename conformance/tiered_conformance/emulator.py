"""Emulator processes for tests: the shared base of every driver's launcher.

Part of the test kit (like ``tox.pytest``): a driver distribution subclasses
:class:`Emulator` in its own ``emulator`` module (fake-gcs-server in
``tiered_driver_gcs.emulator``, Azurite in ``tiered_driver_azure.emulator``) and offers
it to the conformance suite through the ``tiered_conformance_environment`` hook.

An :class:`Emulator` binds a free port on 127.0.0.1, keeps its data in a directory (so a
killed emulator restarted on the same directory sees the same objects), waits until it
answers HTTP (and is the expected server, not another one on that port), and stops with
its process group. A failure to start raises :class:`EmulatorError` naming the binary,
the port and the tail of the emulator's log.

Nothing here imports pytest: benchmarks and ``tiered conformance`` use it too.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, TypeVar


class EmulatorError(RuntimeError):
    """An emulator could not be found, started or reached; the message says which and why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Taken below the kernel's ephemeral range, from a slice only this pytest-xdist worker
    uses: a port the kernel may hand to any client socket, or that another worker's
    emulator may pick, could be taken while a killed emulator is down, and its restart
    would then find another server answering there.
    """
    low, high = _private_ports()
    rng = random.Random()
    for _ in range(64):
        port = rng.randrange(low, high)
        if _port_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _private_ports() -> tuple[int, int]:
    """This process's slice of the ports between 10000 and the ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low = 10000
    if ephemeral_low - low < 1000:
        return 1024, max(ephemeral_low, 2048)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if count <= 1 or index >= count:
        return low, ephemeral_low
    width = (ephemeral_low - low) // count
    return low + index * width, low + (index + 1) * width


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
            if answered and self.process is not None and self.process.poll() is None:
                return  # (an answer while our process exits comes from another server)
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


def binary_from_env(variable: str, *candidates: str, hint: str) -> str:
    """An emulator binary: ``$variable`` if set, else the first of ``candidates`` on PATH.

    Raises :class:`EmulatorError` with ``hint`` (how to install it) when none is found.
    """
    import shutil

    configured = os.environ.get(variable)
    if configured:
        return configured
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise EmulatorError(f"{' / '.join(candidates)} not found: {hint}, or set {variable}")


E = TypeVar("E", bound=Emulator)


@contextlib.contextmanager
def running(emulator: E, setup: Callable[[E], None] | None = None) -> Iterator[E]:
    """``emulator`` started (then ``setup(emulator)``, e.g. creating a bucket), closed on exit."""
    try:
        emulator.start()
        if setup is not None:
            setup(emulator)
        yield emulator
    finally:
        emulator.close()


__all__ = ["Emulator", "EmulatorError", "binary_from_env", "free_port", "running"]
