"""Capability requirements: one documented predicate per capability.

A suite test never asks which driver it runs against; it declares what it needs,
SQLAlchemy-requirements style::

    from tiered_conformance.requirements import requires

    class MyTests(ConformanceBase):
        @requires.conditional_append
        def test_racing_writers(self, driver, prefix): ...

Before the test runs, the suite evaluates each named predicate against the
``capabilities`` fixture. A test whose requirement is not met is skipped with a reason
that names the capability and, when the capability was overridden for this run (an
emulator gap declared with ``--tiered-capability``), the recorded reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from tiered_core.spi.capabilities import Capabilities

F = TypeVar("F", bound=Callable[..., object])

#: Attribute a decorated test function carries: the names of its requirements.
REQUIRES_ATTR = "__tiered_requires__"


@dataclass(frozen=True)
class Requirement:
    """A named predicate over :class:`Capabilities`.

    ``field`` is the capability the predicate reads (used to find an override
    reason); ``doc`` says in one line what a driver must do to satisfy it.
    """

    name: str
    field: str
    doc: str
    predicate: Callable[[Capabilities], bool]

    def __call__(self, func: F) -> F:
        """Use as a decorator: mark ``func`` as needing this requirement."""
        names = tuple(getattr(func, REQUIRES_ATTR, ())) + (self.name,)
        setattr(func, REQUIRES_ATTR, names)
        return func

    def skip_reason(self, caps: Capabilities) -> str | None:
        """``None`` when ``caps`` satisfies the requirement, else why the test is skipped."""
        if self.predicate(caps):
            return None
        value = getattr(caps, self.field)
        reason = f"needs capability {self.field!r} ({self.doc}); this run has {self.field}={value!r}"
        overridden = dict(caps.overridden).get(self.field)
        if overridden:
            reason += f" [overridden: {overridden}]"
        return reason


def _capability(name: str, doc: str) -> Requirement:
    """The requirement that the boolean capability ``name`` is set."""
    return Requirement(name, name, doc, lambda caps: bool(getattr(caps, name)))


class Requirements:
    """Every requirement the suite uses. Attribute access returns a decorator."""

    conditional_append = _capability(
        "conditional_append", "the backend itself rejects a write at a stale position, even between racing writers")
    seal = _capability("seal", "after seal() the backend rejects writes with SegmentSealed")
    list = _capability("list", "list(prefix) enumerates stored objects with their sizes")
    persistent = _capability(
        "persistent", "a fresh driver instance with the same options sees the same bytes")
    survives_process_exit = _capability(
        "survives_process_exit", "bytes written by another process are readable after it exits")
    concurrent_paths = _capability(
        "concurrent_paths", "several threads may use one driver instance for different paths at once")
    atomic_write = _capability("atomic_write", "a write stores all of its bytes or none")
    create_if_absent = _capability(
        "create_if_absent", "write_if_absent is atomic: of racing creators exactly one succeeds, readers never see a part")

    @classmethod
    def all(cls) -> dict[str, Requirement]:
        return {k: v for k, v in vars(cls).items() if isinstance(v, Requirement)}


requires = Requirements()


def requirements_of(func: object) -> tuple[Requirement, ...]:
    """The requirements declared on a test function (empty if none)."""
    known = Requirements.all()
    return tuple(known[name] for name in getattr(func, REQUIRES_ATTR, ()))


def skip_reason(func: object, caps: Capabilities) -> str | None:
    """Why ``func`` cannot run with ``caps`` (all unmet requirements), or ``None``."""
    reasons = [r for r in (req.skip_reason(caps) for req in requirements_of(func)) if r]
    return "; ".join(reasons) if reasons else None
