"""moto's S3 server with each request handled as one step (test tooling, not driver code).

moto 5.2.5 checks a write's precondition and then writes, with no lock between the two,
while its server handles requests on many threads. Two ``PutObject`` calls with
``If-None-Match: *`` racing for one key could both pass the check, and both then report
success. Under load this happened in about 4 of 1,000 races (``tests`` of the s3 driver,
``test_conditional_append_race``). S3 itself decides each conditional write atomically,
and the driver's guarantees rest on that.

``python -m tiered_driver_s3.moto_atomic -H HOST -p PORT`` serves moto's application (the
one ``python -m moto.server`` serves) with every S3 request's handling under one lock, so a
check and its write are one step, as on S3. Connections are still accepted and read on
their own threads. moto's handlers hold the interpreter lock while they run, so the lock
costs little throughput.

The server is werkzeug's threaded server, as in ``moto.server``, with connections kept
open between requests (:mod:`tiered_driver_s3.http_keepalive` says how): moto's own closes
the connection after every answer, so each S3 request of a test paid a new TCP connection
on both sides. SIGTERM and SIGINT stop it.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
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


def serve(host: str, port: int) -> None:
    """Serve moto's application on ``host:port`` until SIGTERM or SIGINT."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from tiered_driver_s3.http_keepalive import KeepAliveHandler

    os.environ.setdefault("MOTO_PORT", str(port))  # as moto.server: the port its answers name
    make_s3_requests_atomic()
    list_moto_modules_once()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    make_server(host, port, app, threaded=True, request_handler=KeepAliveHandler).serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tiered_driver_s3.moto_atomic",
                                     description="moto's S3 server, each request one step, connections kept open")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
