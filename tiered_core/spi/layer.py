"""Driver layers, OpenDAL-style: drivers that wrap another one and add one concern.

A layer forwards every SPI call to ``inner`` and overrides only the calls it changes, so
the inner driver never knows it is wrapped. Every driver opened through the registry
(:func:`tiered_core.plugins.open_driver`, hence every store) is wrapped by
:func:`layered`::

    ValidatingLayer     paths, prefixes, ranges and data are checked, and calls after
      |                 close() refused, before the driver sees them
    RetryLayer          retryable failures of idempotent calls are retried with
      |                 jittered exponential backoff, within an attempt count and a
      |                 time budget
    <the driver>        assumes valid input; reports failures as DriverError(retryable=...)

so a driver -- first- or third-party -- needs neither validation nor retry code of its
own. The store adds its fence on top (``tiered_core.flat.ownership.FencedDriver``);
tests add a fault layer (``tiered_conformance.faults.FaultLayer``) and a
:class:`CountingLayer`, benchmarks a :class:`CountingLayer`.

What is retried, and why (the :class:`RetryLayer` contract):

* ``size``, ``exists``, ``is_sealed``, ``read`` and ``list`` change nothing, and
  ``create``, ``seal`` and ``delete`` are idempotent: repeating one after a failure whose
  effect is unknown (a lost answer) is harmless. They are retried.
* ``write`` is not: a write whose answer was lost may have landed (all of it or a
  prefix), and sending it again would either fail with ``PositionMismatch`` or, where the
  backend cannot enforce positions, store the bytes twice. The failure goes to the
  caller; :class:`tiered_core.segment.FileSegment` asks ``size()`` how much landed and
  resumes from there.
* ``write_if_absent`` is retried, and the retry's answer is checked: after an attempt
  that failed in an unknown state, "something is already there" may be this call's own
  object, whose answer was lost. The layer then reads the object back and reports True
  when it holds exactly this call's bytes. Bytes are the only identity the SPI has, so
  callers that race on one path must make their payloads unique (ownership records carry
  the store id, host, pid and time).
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from tiered_core.errors import DriverError, IllegalParam, SegmentClosed, TieredStoreError
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import REDACTED, SegmentDriver, scrubbed_texts, secret_values

log = logging.getLogger(__name__)

L = TypeVar("L", bound=SegmentDriver)


class DriverLayer(SegmentDriver):
    """Forwards every SPI call to ``inner``; its name, capabilities, secrets, retry policy
    and options are the inner driver's. ``close()`` closes ``inner`` too (the layer owns
    it); ``reopen()`` reopens ``inner`` and wraps the new instance in a copy of this layer
    (:meth:`with_inner`), so a reopened stack keeps its layers."""

    def __init__(self, inner: SegmentDriver) -> None:
        self.inner = inner
        self.options = dict(inner.options)

    @property  # type: ignore[override]
    def name(self) -> str:  # noqa: D401 - mirrors the ClassVar
        return self.inner.name

    @property
    def layout(self) -> str:
        return self.inner.layout

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property  # type: ignore[override]
    def secret_options(self) -> frozenset[str]:
        return self.inner.secret_options

    @property  # type: ignore[override]
    def retry_policy(self) -> "RetryPolicy | None":
        return self.inner.retry_policy

    @property
    def innermost(self) -> SegmentDriver:
        """The backend driver under every layer."""
        return backend_of(self)

    def _call(self, op: str, target: str, call: Callable[[], Any]) -> Any:
        """Every forwarded call but ``write`` and ``write_if_absent`` runs through here
        (``op`` the SPI name, ``target`` the path or prefix): a layer that wraps calls
        (retry, faults, counting) overrides this one method."""
        return call()

    def size(self, path: str) -> int:
        return self._call("size", path, lambda: self.inner.size(path))

    def exists(self, path: str) -> bool:
        return self._call("exists", path, lambda: self.inner.exists(path))

    def create(self, path: str) -> None:
        self._call("create", path, lambda: self.inner.create(path))

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        self.inner.write(path, position, data)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self.inner.write_if_absent(path, data)

    def read(self, path: str, position: int, length: int) -> bytes:
        return self._call("read", path, lambda: self.inner.read(path, position, length))

    def seal(self, path: str) -> None:
        self._call("seal", path, lambda: self.inner.seal(path))

    def is_sealed(self, path: str) -> bool:
        return self._call("is_sealed", path, lambda: self.inner.is_sealed(path))

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: self.inner.delete(path))

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self._call("list", prefix, lambda: self.inner.list(prefix))

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self._call("list", prefix, lambda: self.inner.foreign_objects(prefix))

    def leftover_objects(self, prefix: str = "") -> Iterator[tuple[str, str, int]]:
        return self._call("list", prefix, lambda: self.inner.leftover_objects(prefix))

    def close(self) -> None:
        self.inner.close()

    def reopen(self) -> SegmentDriver:
        return self.with_inner(self.inner.reopen())

    def with_inner(self, inner: SegmentDriver) -> "DriverLayer":
        """This layer, configured as it is, around ``inner``. The default is a shallow copy;
        layers with per-instance state (locks, counters, plans) override it."""
        clone = copy.copy(self)
        clone.inner = inner
        clone.options = dict(inner.options)
        return clone

    def describe(self) -> dict[str, Any]:
        out = self.inner.describe()
        out.setdefault("layers", []).insert(0, type(self).__name__)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


def backend_of(driver: SegmentDriver) -> SegmentDriver:
    """The driver under every layer of ``driver`` (``driver`` itself when it is no layer)."""
    while isinstance(driver, DriverLayer):
        driver = driver.inner
    return driver


def find_layer(driver: SegmentDriver, cls: type[L]) -> L | None:
    """The outermost layer (or backend) of ``driver``'s stack that is a ``cls``, or None."""
    while True:
        if isinstance(driver, cls):
            return driver
        if not isinstance(driver, DriverLayer):
            return None
        driver = driver.inner


# -- validation ------------------------------------------------------------------------


def bytes_like(path: str, data: Any) -> bytes | bytearray | memoryview:
    """``data`` as a flat byte buffer (no copy), or :class:`~tiered_core.errors.IllegalParam`."""
    if isinstance(data, (bytes, bytearray)):
        return data
    try:
        view = data if isinstance(data, memoryview) else memoryview(data)
    except TypeError:
        raise IllegalParam(f"data for {path!r} must be bytes-like, got {type(data).__name__}",
                           path=path) from None
    if view.format in ("B", "b", "c") and view.ndim == 1 and view.contiguous:
        return view
    if not view.contiguous:
        raise IllegalParam(f"data for {path!r} must be a contiguous buffer", path=path)
    return view.cast("B")


class ValidatingLayer(DriverLayer):
    """Checks every call's input before the driver sees it, and what the driver answers.

    Paths go through :meth:`SegmentDriver.check_path` (the driver gets the normalized
    path), prefixes through :meth:`~SegmentDriver.check_prefix`, positions and lengths
    through :meth:`~SegmentDriver.check_range`; written data must be bytes-like, and
    ``write_if_absent`` data non-empty. After :meth:`close` (idempotent) every call raises
    :class:`~tiered_core.errors.SegmentClosed`.

    The driver's side of the contract is held too, so that a broken driver is named as
    such instead of passing for a bug of the store or a failure of the backend: a read
    returning another number of bytes than asked is a :class:`~tiered_core.errors.DriverError`
    saying so; an exception that is not a :class:`~tiered_core.errors.TieredStoreError`
    becomes a DriverError naming the driver, the call and the exception (not retryable);
    and the value of a secret option in an error's text is replaced by ``***`` (the error
    then carries ``secrets_redacted=True``, which the conformance suite fails on).
    """

    def __init__(self, inner: SegmentDriver) -> None:
        super().__init__(inner)
        self._closed = False
        self._secrets = _secret_texts(backend_of(inner))

    def with_inner(self, inner: SegmentDriver) -> "ValidatingLayer":
        return ValidatingLayer(inner)

    def _path(self, path: str) -> str:
        if self._closed:
            raise SegmentClosed(f"driver {self.name!r} is closed (while accessing {path!r})", path=path)
        return self.check_path(path)

    def _guard(self, op: str, target: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except TieredStoreError as exc:
            if self._secrets and _scrub(exc, self._secrets):
                raise exc.with_traceback(None) from None
            raise
        except Exception as exc:  # noqa: BLE001 - a driver broke the contract: named, not passed on raw
            text = _scrubbed(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", self._secrets)
            raise DriverError(
                f"driver {self.name!r}: {op} of {target!r} raised {text} (a driver reports failures as "
                "tiered_core.errors.DriverError: this is a bug of the driver, `tiered conformance "
                f"{self.name}` shows which contract it breaks)", retryable=False, path=target, op=op,
                exception=type(exc).__name__) from (None if self._secrets else exc)

    def size(self, path: str) -> int:
        path = self._path(path)
        return self._guard("size", path, lambda: self.inner.size(path))

    def exists(self, path: str) -> bool:
        path = self._path(path)
        return self._guard("exists", path, lambda: self.inner.exists(path))

    def create(self, path: str) -> None:
        path = self._path(path)
        self._guard("create", path, lambda: self.inner.create(path))

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        path = self._path(path)
        self.check_range(path, position)
        data = bytes_like(path, data)
        self._guard("write", path, lambda: self.inner.write(path, position, data))

    def write_if_absent(self, path: str, data: bytes) -> bool:
        path = self._path(path)
        data = bytes_like(path, data)
        if not len(data):
            raise IllegalParam(f"write_if_absent of {path!r} needs data", path=path)
        return self._guard("write_if_absent", path, lambda: self.inner.write_if_absent(path, data))

    def read(self, path: str, position: int, length: int) -> bytes:
        path = self._path(path)
        self.check_range(path, position, length)
        data = self._guard("read", path, lambda: self.inner.read(path, position, length))
        if len(data) != length:
            raise DriverError(
                f"driver {self.name!r}: read of {path!r} at {position} returned {len(data)} of the {length} bytes "
                "asked (a driver returns exactly the bytes asked, or raises: a bug of the driver, or a backend "
                "that answered short)", retryable=False, path=path, position=position, length=length,
                returned=len(data))
        return data

    def seal(self, path: str) -> None:
        path = self._path(path)
        self._guard("seal", path, lambda: self.inner.seal(path))

    def is_sealed(self, path: str) -> bool:
        path = self._path(path)
        return self._guard("is_sealed", path, lambda: self.inner.is_sealed(path))

    def delete(self, path: str) -> None:
        path = self._path(path)
        self._guard("delete", path, lambda: self.inner.delete(path))

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        if self._closed:
            raise SegmentClosed(f"driver {self.name!r} is closed (while listing {prefix!r})", path=prefix)
        prefix = self.check_prefix(prefix)
        return self._guard("list", prefix, lambda: self.inner.list(prefix))

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        if self._closed:
            raise SegmentClosed(f"driver {self.name!r} is closed (while listing {prefix!r})", path=prefix)
        prefix = self.check_prefix(prefix)
        return self._guard("list", prefix, lambda: self.inner.foreign_objects(prefix))

    def leftover_objects(self, prefix: str = "") -> Iterator[tuple[str, str, int]]:
        if self._closed:
            raise SegmentClosed(f"driver {self.name!r} is closed (while listing {prefix!r})", path=prefix)
        prefix = self.check_prefix(prefix)
        return self._guard("list", prefix, lambda: self.inner.leftover_objects(prefix))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.inner.close()

    @property
    def closed(self) -> bool:
        return self._closed


def _secret_texts(driver: SegmentDriver) -> list[str]:
    """The values of ``driver``'s secret options (declared, or secret by name, nested), longest first."""
    options = getattr(driver, "options", None) or {}
    declared = [str(options[k]) for k in getattr(driver, "secret_options", ()) if options.get(k) not in (None, "")]
    return scrubbed_texts([*declared, *secret_values(options)])


def _scrubbed(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _scrub(exc: TieredStoreError, secrets: list[str]) -> bool:
    """Replace every secret in ``exc``'s message and text context by ``***``; whether any was there."""
    changed = False
    message = _scrubbed(exc.message, secrets)
    if message != exc.message:
        exc.message, exc.args, changed = message, (message, *exc.args[1:]), True
    for key, value in list(exc.context.items()):
        if isinstance(value, str) and (clean := _scrubbed(value, secrets)) != value:
            exc.context[key] = clean
            setattr(exc, key, clean)
            changed = True
    if changed:
        exc.context["secrets_redacted"] = True
        exc.secrets_redacted = True  # type: ignore[attr-defined]
    return changed


# -- retry -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How the :class:`RetryLayer` retries a retryable failure of an idempotent call.

    At most ``retries`` retries after the first attempt; before retry *n* it sleeps
    ``min(max_delay, base_delay * 2 ** (n - 1))`` scaled by a random factor in [0.5, 1)
    (jitter, so that many clients do not retry in step); no retry starts when it would
    begin more than ``budget`` seconds after the first attempt did.
    """

    retries: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    budget: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.base_delay < 0 or self.max_delay < 0 or self.budget < 0:
            raise ValueError(f"a RetryPolicy takes no negative values: {self}")

    def delay(self, retry: int, rand: float) -> float:
        """Seconds to wait before retry number ``retry`` (1-based); ``rand`` in [0, 1)."""
        return min(self.max_delay, self.base_delay * 2 ** (retry - 1)) * (0.5 + rand / 2)


#: Used when neither the caller nor the driver names one.
DEFAULT_RETRY_POLICY = RetryPolicy()


class RetryLayer(DriverLayer):
    """Retries retryable :class:`~tiered_core.errors.DriverError` of the calls that are safe
    to repeat (see the module docstring: never ``write``; ``write_if_absent`` with a
    content check). ``policy`` defaults to the driver's ``retry_policy``, else
    :data:`DEFAULT_RETRY_POLICY`. When it gives up, the last error is raised, its message
    saying how many attempts were made."""

    def __init__(self, inner: SegmentDriver, policy: RetryPolicy | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(inner)
        self.policy = policy or inner.retry_policy or DEFAULT_RETRY_POLICY
        self._sleep = sleep
        self._clock = clock

    def with_inner(self, inner: SegmentDriver) -> "RetryLayer":
        return RetryLayer(inner, self.policy, sleep=self._sleep, clock=self._clock)

    @property  # type: ignore[override]
    def retry_policy(self) -> RetryPolicy:
        return self.policy

    def _retry(self, op: str, target: str, call: Callable[[], Any],
               on_retry: Callable[[], None] | None = None) -> Any:
        policy = self.policy
        start = self._clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except DriverError as exc:
                if not exc.retryable:
                    raise
                elapsed = self._clock() - start
                delay = policy.delay(attempt, random.random())
                if attempt > policy.retries or elapsed + delay > policy.budget:
                    if attempt > 1:
                        exc.message = f"{exc.message} (gave up after {attempt} attempts in {elapsed:.1f} s)"
                        exc.context["attempts"] = exc.attempts = attempt
                    raise
                log.debug("%s of %r failed (%s); retry %d in %.3f s", op, target, exc, attempt, delay)
                if on_retry is not None:
                    on_retry()
                self._sleep(delay)

    _call = _retry

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        # Materialized inside the retry, so that a failure while iterating is retried too.
        return iter(self._retry("list", prefix, lambda: list(self.inner.list(prefix))))

    # write: never repeated (see the module docstring), so DriverLayer's plain forward.

    def write_if_absent(self, path: str, data: bytes) -> bool:
        uncertain = False

        def after_failure() -> None:
            nonlocal uncertain
            uncertain = True  # an attempt failed: it may have created the object

        created = self._retry("write_if_absent", path, lambda: self.inner.write_if_absent(path, data),
                              after_failure)
        if created or not uncertain:
            return created
        # "Already there" after a failed attempt: ours, if it holds exactly our bytes.
        expected = bytes(data)
        if self.size(path) != len(expected):
            return False
        return self.read(path, 0, len(expected)) == expected


# -- counting --------------------------------------------------------------------------


class CountingLayer(DriverLayer):
    """Counts the calls, failed calls and bytes of each operation passing through it.

    ``calls[op]`` and ``errors[op]`` count calls by SPI operation name; ``bytes["write"]``
    (and ``"write_if_absent"``) the bytes handed to the driver, ``bytes["read"]`` the
    bytes it returned. Thread-safe; :meth:`reset` zeroes everything, :meth:`snapshot`
    copies it. For benchmarks, tests ("this path never reads the backend") and metrics.
    """

    def __init__(self, inner: SegmentDriver) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def with_inner(self, inner: SegmentDriver) -> "CountingLayer":
        return CountingLayer(inner)

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.errors.clear()
            self.bytes.clear()

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"calls": dict(self.calls), "errors": dict(self.errors), "bytes": dict(self.bytes)}

    def _count(self, op: str, call: Callable[[], Any], sent: int = 0) -> Any:
        try:
            result = call()
        except BaseException:
            with self._lock:
                self.calls[op] += 1
                self.errors[op] += 1
                if sent:
                    self.bytes[op] += sent
            raise
        with self._lock:
            self.calls[op] += 1
            if sent:
                self.bytes[op] += sent
            elif op == "read":
                self.bytes[op] += len(result)
        return result

    def _call(self, op: str, target: str, call: Callable[[], Any]) -> Any:
        return self._count(op, call)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        self._count("write", lambda: self.inner.write(path, position, data), _nbytes(data))

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self._count("write_if_absent", lambda: self.inner.write_if_absent(path, data), _nbytes(data))


def _nbytes(data: Any) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


# -- the standard stack ----------------------------------------------------------------


def layered(driver: SegmentDriver, policy: RetryPolicy | None = None) -> SegmentDriver:
    """``driver`` wrapped in the standard layers: ``ValidatingLayer(RetryLayer(driver))``.

    What :func:`tiered_core.plugins.open_driver` returns, and what the conformance suite
    runs against. A stack that already holds a :class:`ValidatingLayer` is returned as
    it is (wrapping twice would retry twice). ``policy`` overrides the driver's
    ``retry_policy``.
    """
    if find_layer(driver, ValidatingLayer) is not None:
        return driver
    return ValidatingLayer(RetryLayer(driver, policy))


__all__ = [
    "DEFAULT_RETRY_POLICY",
    "CountingLayer",
    "DriverLayer",
    "RetryLayer",
    "RetryPolicy",
    "ValidatingLayer",
    "backend_of",
    "bytes_like",
    "find_layer",
    "layered",
]
