"""moto's S3 server with each request handled as one step (test tooling, not driver code).

moto 5.2.5 checks a write's precondition and then writes, with no lock between the two,
while its server handles requests on many threads. Two ``PutObject`` calls with
``If-None-Match: *`` racing for one key could both pass the check, and both then report
success. Under load this happened in about 4 of 1,000 races (``tests`` of the s3 driver,
``test_conditional_append_race``). S3 itself decides each conditional write atomically,
and the driver's guarantees rest on that.

``python -m tiered_driver_s3.moto_atomic`` takes the arguments of ``python -m moto.server``.
It runs that server with every S3 request's handling under one lock, so a check and its
write are one step, as on S3. Connections are still accepted and read on their own
threads. moto's handlers hold the interpreter lock while they run, so the lock costs
little throughput.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable, Iterator

#: The S3Response methods every bucket and object request goes through (moto 5.x).
_HANDLERS = ("_bucket_response", "_key_response")
_LOCK = threading.RLock()


def _one_at_a_time(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def handle(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return handler(*args, **kwargs)

    handle.__tiered_atomic__ = True  # type: ignore[attr-defined]
    return handle


def make_s3_requests_atomic() -> None:
    """Wrap moto's S3 request handlers in one process-wide lock (idempotent). Raises
    :class:`RuntimeError` when this moto has no such handler: a moto whose layout changed
    must not silently run without the lock."""
    from moto.s3.responses import S3Response

    for name in _HANDLERS:
        handler = getattr(S3Response, name, None)
        if handler is None:
            raise RuntimeError(f"moto's S3Response has no {name}: this launcher supports moto 5.x")
        if not getattr(handler, "__tiered_atomic__", False):
            setattr(S3Response, name, _one_at_a_time(handler))


def list_moto_modules_once() -> None:
    """Make ``moto.backends.list_of_moto_modules`` answer from a list read once (idempotent).

    moto's server asks it twice per request, to route the request to a service, and it lists
    moto's package folder and stats each of its ~200 entries every time: about 3 ms of the
    ~12 ms moto spent per S3 request here (profiled). The folder does not change while
    the server runs."""
    from moto import backends

    if getattr(backends.list_of_moto_modules, "__tiered_once__", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def list_of_moto_modules() -> Iterator[str]:
        return iter(modules)

    list_of_moto_modules.__tiered_once__ = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules


def main(argv: list[str] | None = None) -> None:
    from moto.server import main as moto_main

    make_s3_requests_atomic()
    list_moto_modules_once()
    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
