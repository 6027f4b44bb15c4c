"""Turning a failed Spark job back into the typed error its task raised."""

from __future__ import annotations

import re

from tiered_core import errors
from tiered_core.errors import DriverError, TieredStoreError

_TASK_ERROR = re.compile(r"tiered_core\.errors\.(\w+): \[\w+\] (.*)")


def task_error(exc: BaseException, what: str) -> TieredStoreError:
    """The :mod:`tiered_core.errors` type a Spark task raised (found in the job failure's text),
    with ``what`` before its message; a retryable :class:`DriverError` when none is named."""
    if isinstance(exc, TieredStoreError):
        return exc
    text = str(exc)
    match = _TASK_ERROR.search(text)
    if match:
        cls = getattr(errors, match.group(1), None)
        if isinstance(cls, type) and issubclass(cls, TieredStoreError):
            err = cls.__new__(cls)
            TieredStoreError.__init__(err, f"{what}: {match.group(2).strip()}")
            if isinstance(err, DriverError):
                err.retryable = True
            return err
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return DriverError(f"{what}: {first[:500]}", retryable=True)
