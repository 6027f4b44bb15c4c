"""DriverLayer: a driver that wraps another one and forwards every call to it.

A layer adds one concern around an inner driver (fencing a tier prefix, validation,
retries, fault injection, counting...) without the inner driver knowing; subclasses
override only the calls they change. Layers stack: ``Fenced(Retry(Posix(...)))``.
"""

from __future__ import annotations

from typing import Any, Iterator

from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver


class DriverLayer(SegmentDriver):
    """Forwards every SPI call to ``inner``; its name, capabilities, secrets and options
    are the inner driver's. ``close()`` closes ``inner`` too (the layer owns it)."""

    def __init__(self, inner: SegmentDriver) -> None:
        self.inner = inner
        self.options = dict(inner.options)

    @property  # type: ignore[override]
    def name(self) -> str:  # noqa: D401 - mirrors the ClassVar
        return self.inner.name

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property  # type: ignore[override]
    def secret_options(self) -> frozenset[str]:
        return self.inner.secret_options

    @property
    def innermost(self) -> SegmentDriver:
        """The backend driver under every layer."""
        inner = self.inner
        while isinstance(inner, DriverLayer):
            inner = inner.inner
        return inner

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def create(self, path: str) -> None:
        self.inner.create(path)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        self.inner.write(path, position, data)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self.inner.write_if_absent(path, data)

    def read(self, path: str, position: int, length: int) -> bytes:
        return self.inner.read(path, position, length)

    def seal(self, path: str) -> None:
        self.inner.seal(path)

    def is_sealed(self, path: str) -> bool:
        return self.inner.is_sealed(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    def reopen(self) -> SegmentDriver:
        return self.inner.reopen()

    def describe(self) -> dict[str, Any]:
        out = self.inner.describe()
        out.setdefault("layers", []).insert(0, type(self).__name__)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
