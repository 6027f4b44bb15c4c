"""Fixtures and helpers shared by every test mixin of the suite.

Fixture contract for a class that runs the suite:

``driver``
    A driver instance. Each test writes only below its own random ``prefix``, so one
    shared location for the whole run is fine; ``driver.reopen()`` must give another
    instance on the same location. Default: the ``--tiered-driver`` driver. Whatever it
    yields, the suite runs it in the standard layers (validation, retry:
    :func:`tiered_core.spi.layer.layered`), as ``open_driver`` opens it for a store -- a
    subclass's own ``driver`` fixture is wrapped too (see
    :meth:`ConformanceBase.__init_subclass__`), so a driver that constructs its instance
    directly gets the same checks and retries.
``capabilities``
    What the suite may expect. Default: ``driver.capabilities`` with the run's
    ``--tiered-capability`` overrides applied. Override it to declare emulator gaps
    (``Capabilities.override(reason, field=value)``); skips then show the reason.
"""

from __future__ import annotations

import functools
import inspect
import random
import threading
import uuid
from typing import Any, Callable, ClassVar, Iterator

import pytest

from tiered_core.segment import FileSegment
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import backend_of, layered
from tiered_conformance.plugin import NO_DRIVER_MESSAGE, suite_settings
from tiered_conformance.requirements import skip_reason

#: Largest single read the helpers issue.
READ_CHUNK = 4 << 20


class ConformanceBase:
    """Base of the suite's test mixins: the fixtures above plus capability gating.

    Every test method may declare requirements with
    :data:`tiered_conformance.requirements.requires`; an unmet one skips the test
    with a reason naming the capability. After each test, objects below ``prefix``
    are deleted (best effort, when the driver can list).
    """

    #: Which part of the suite a mixin covers (the ``tiered conformance`` table rows).
    tiered_area: ClassVar[str] = "other"

    @pytest.fixture
    def driver(self, request: pytest.FixtureRequest) -> SegmentDriver:
        try:
            return layered(request.getfixturevalue("tiered_driver"))
        except pytest.FixtureLookupError:  # the plugin is disabled (-p no:tiered_conformance)
            pytest.fail(NO_DRIVER_MESSAGE, pytrace=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``driver`` fixture is replaced by one that yields its driver in
        the standard layers (and runs its teardown as before)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("driver")
        if own is not None:
            cls.driver = _in_standard_layers(own)

    @pytest.fixture
    def capabilities(self, driver: SegmentDriver, request: pytest.FixtureRequest) -> Capabilities:
        return suite_settings(request.config).apply_overrides(driver.capabilities)

    @pytest.fixture
    def prefix(self) -> str:
        """A fresh directory-like prefix, unique to this test."""
        return f"tiered-conformance/{uuid.uuid4().hex}/"

    @pytest.fixture(autouse=True)
    def _tiered_gate(self, request: pytest.FixtureRequest, driver: SegmentDriver,
                     capabilities: Capabilities, prefix: str) -> Iterator[None]:
        reason = skip_reason(request.function, capabilities)
        if reason:
            pytest.skip(reason)
        yield
        if capabilities.list:
            try:
                for path, _ in list(driver.list(prefix)):
                    driver.delete(path)
            except Exception:  # cleanup must not hide the test's own outcome
                pass


def _in_standard_layers(fixture: Any) -> Any:
    """The fixture ``fixture``, its value wrapped by :func:`layered` (idempotent)."""
    func = getattr(fixture, "__wrapped__", None)  # pytest keeps the function there
    if func is None or getattr(func, "_tiered_layered", False):
        return fixture
    marker = getattr(fixture, "_fixture_function_marker", None)  # scope and params, if any

    @functools.wraps(func)
    def driver(*args: Any, **kwargs: Any) -> Iterator[SegmentDriver]:
        made = func(*args, **kwargs)
        if not inspect.isgenerator(made):
            yield layered(made)
            return
        try:
            yield layered(next(made))
        finally:
            next(made, None)  # the fixture's own teardown

    driver._tiered_layered = True  # type: ignore[attr-defined]
    if marker is None:
        return pytest.fixture(driver)
    return pytest.fixture(driver, scope=marker.scope, params=marker.params, ids=marker.ids)


def backend_class(driver: SegmentDriver) -> type[SegmentDriver]:
    """The class of the driver under ``driver``'s layers (its options, secrets, coercion)."""
    return type(backend_of(driver))


def run_threads(target: Callable[[int], None], count: int) -> None:
    """``target(i)`` for ``i`` in ``range(count)``, each on its own thread, all started, then joined."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def segment_holding(driver: SegmentDriver, path: str, *parts: bytes, **options: Any) -> FileSegment:
    """A :class:`FileSegment` on ``path`` with ``parts`` appended (nothing committed yet)."""
    seg = FileSegment(driver, path, **options)
    for part in parts:
        seg.append(part)
    return seg


def payload(size: int, seed: Any) -> bytes:
    """``size`` pseudo-random bytes, the same for the same ``seed``."""
    return random.Random(f"tiered-conformance:{seed}").randbytes(size)


def write_chunks(driver: SegmentDriver, caps: Capabilities, path: str, position: int, data: bytes) -> int:
    """Write ``data`` at ``position`` in calls of at most ``caps.max_write_size``; the new size."""
    step = caps.max_write_size or len(data) or 1
    view = memoryview(data)
    if not data:
        driver.write(path, position, b"")
    for start in range(0, len(data), step):
        chunk = view[start:start + step]
        driver.write(path, position + start, bytes(chunk))
    return position + len(data)


def read_all(driver: SegmentDriver, path: str, size: int, chunk: int = READ_CHUNK) -> bytes:
    """All ``size`` bytes of ``path``, read in ranges of at most ``chunk``."""
    parts = []
    for start in range(0, size, chunk):
        parts.append(driver.read(path, start, min(chunk, size - start)))
    return b"".join(parts)
