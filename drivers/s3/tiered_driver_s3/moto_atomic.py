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

The HTTP server is gunicorn's threaded worker (one process: moto keeps the objects in its
memory), not the development server ``moto.server`` starts: that one closes the connection
after every answer, so each request of a client paid a new TCP connection on both sides.
With connections kept open, a test's S3 requests cost about a fifth less CPU in the client
and in the server. SIGTERM stops it within a second; SIGKILL of its process group (a
crash, in fault tests) ends both of its processes.
"""

from __future__ import annotations

import argparse
import functools
import os
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


#: gunicorn's settings: one worker process (moto's state lives in it), its threads answering
#: requests, idle connections kept longer than a client's pool keeps them (no request is sent
#: on a connection the server is just closing), a quick stop, no access log.
SERVER_SETTINGS = {"workers": 1, "worker_class": "gthread", "threads": 8, "keepalive": 75,
                   "graceful_timeout": 1, "timeout": 300, "accesslog": None, "loglevel": "warning"}


def serve(host: str, port: int) -> None:
    """Serve moto's application on ``host:port`` until SIGTERM."""
    from gunicorn.app.base import BaseApplication
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    os.environ.setdefault("MOTO_PORT", str(port))  # what moto.server sets for the answers it builds
    make_s3_requests_atomic()
    list_moto_modules_once()
    app = DomainDispatcherApplication(create_backend_app)

    class Server(BaseApplication):
        def load_config(self) -> None:
            for key, value in {**SERVER_SETTINGS, "bind": f"{host}:{port}"}.items():
                self.cfg.set(key, value)

        def load(self):
            return app

    Server().run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tiered_driver_s3.moto_atomic", description=__doc__.split("\n\n")[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
