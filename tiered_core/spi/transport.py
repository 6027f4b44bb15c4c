"""What HTTP-backed drivers share: which statuses are transient, and one request hook point.

Retrying is not a driver's business: the retry layer (:mod:`tiered_core.spi.layer`)
retries a failed *operation* when it is safe to. A driver only says whether a failure
may pass (``DriverError(retryable=...)``); :func:`is_transient` is the one rule for HTTP
statuses.

:class:`RequestHookPoint` is the one place a driver's individual backend requests can be
seen from outside. The driver owns one (as ``driver.transport``) and passes each request
it is about to send through it; in production nothing is installed and the call costs one
attribute read. What is installed there is test and benchmark tooling and lives outside
the core: ``tiered_conformance.request_probe.RequestProbe`` counts the requests (the
benchmarks' requests per MiB) and runs a test's hook, which may fail a request with a
status, cut the connection, or let the backend carry it out and lose the answer.
Operation-level faults need no hook (``tiered_conformance.faults.FaultLayer`` injects
them around any driver); this point is for what only the transport can stage: a lost
answer of one request among the several an operation sends (a GCS compose, one Azure
append block), or killing an emulator while a chosen request is in flight. Why the
counting is not here: docs/ARCHITECTURE.md §11.3.
"""

from __future__ import annotations

from typing import Callable

#: HTTP statuses that may pass: timeouts, throttling and server-side failures.
TRANSIENT_HTTP_STATUS = frozenset({408, 429, 500, 502, 503, 504})

#: What a hook returns to have a request carried out and its answer lost.
LOST_ANSWER = "lost-answer"

#: ``hook(method, what)`` -> None (send it), an HTTP status (fail it with that status
#: without sending it), :data:`LOST_ANSWER`, or raises (a connection failure).
#: ``what`` is the driver's description of the request (GCS: the operation and object,
#: e.g. ``"compose 'seg'"``; Azure: the URL path and its ``comp=`` operation; S3: the
#: operation and key). Never a credential or a query string.
RequestHook = Callable[[str, str], "int | str | None"]


def is_transient(status: int) -> bool:
    """Whether a request that got HTTP ``status`` may succeed when the operation is repeated."""
    return status in TRANSIENT_HTTP_STATUS


class RequestHookPoint:
    """Where a driver passes each backend request before sending it.

    Contract for the driver: call :meth:`before` once per request attempt it is about to
    send (its own retries included) and act on the verdict -- None: send it; an ``int``:
    behave as if the backend had answered with that HTTP status, without sending;
    :data:`LOST_ANSWER`: send it, then raise :meth:`answer_lost` instead of returning the
    answer; an exception raised by the hook: treat it as a connection failure.

    Contract for whoever installs :attr:`hook` (tests, benchmarks): it may be called from
    several threads at once, and must not keep a reference to request bodies. With no hook
    installed :meth:`before` returns None and does nothing else.
    """

    __slots__ = ("hook",)

    def __init__(self) -> None:
        self.hook: RequestHook | None = None

    def before(self, method: str, what: str) -> int | str | None:
        """The installed hook's verdict on request ``what`` (None when there is no hook)."""
        hook = self.hook
        return None if hook is None else hook(method, what)

    @staticmethod
    def answer_lost() -> ConnectionResetError:
        """The exception a driver raises after carrying out a request marked :data:`LOST_ANSWER`."""
        return ConnectionResetError("injected: answer lost after the request was carried out")


__all__ = ["LOST_ANSWER", "TRANSIENT_HTTP_STATUS", "RequestHook", "RequestHookPoint", "is_transient"]
