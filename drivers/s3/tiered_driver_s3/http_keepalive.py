"""A request handler for werkzeug's threaded server that keeps connections open (test tooling).

werkzeug's development server, which ``python -m moto.server`` runs, answers every request
with ``Connection: close`` and then drains the socket: it hands the application the raw
socket as its input, so it cannot know where the next request would begin. A client then
pays a new TCP connection (and the server a new thread) for each S3 request.

:class:`KeepAliveHandler` reads each request's body whole before the application runs
(``Content-Length`` bytes, or a chunked body to its end), hands it over in memory, and
sends the whole answer with its ``Content-Length``, so the connection is exactly at the
next request line afterwards and stays open. The environment is werkzeug's own (moto's
handler builds it), so the application sees what it saw before. Each connection has its
own thread blocked in a read of its socket: a request that arrives is always read (no
poller can lose track of a kept-open connection), and a client that dies mid-request ends
only its own thread. The bodies are an emulator's test payloads, so holding them in
memory is fine.
"""

from __future__ import annotations

import io
import socket
import sys
import traceback
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler

#: How long an idle kept-open connection waits for its next request before it is closed (a
#: client whose pooled connection was closed meanwhile opens a new one). Long: a test's
#: clients go quiet for seconds between requests, and each open connection costs a thread.
IDLE_TIMEOUT = 600.0
#: Answers that carry no body (RFC 9110; 1xx too): neither a body nor a Content-Length is sent.
_NO_BODY = frozenset({204, 304})


class KeepAliveHandler(MotoRequestHandler):
    """moto's request handler, with HTTP/1.1 connections kept open between requests.

    Guarantees: a request's body is read whole (or the connection is closed when the client
    went away before sending it), the answer is one write with a correct ``Content-Length``
    (a HEAD's is the application's own), and the connection is closed when the client asks
    for it, speaks HTTP/1.0, or the application fails.
    """

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT

    def setup(self) -> None:
        super().setup()
        # An answer is one write; small requests must not wait for a delayed ACK either.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def run_wsgi(self) -> None:
        # parse_request() already answered an "Expect: 100-continue" (protocol_version is 1.1).
        self.environ = environ = self.make_environ()
        body = self._read_body(environ)
        if body is None:
            self.close_connection = True  # the client went away mid-body
            return
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        try:
            status, headers, chunks = self._call_app(environ)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            status, headers, chunks = "500 INTERNAL SERVER ERROR", [("Content-Type", "text/plain")], [b"error"]
        self._send(status, headers, b"".join(chunks))

    def _read_body(self, environ: dict[str, Any]) -> bytes | None:
        stream = environ["wsgi.input"]
        if environ.get("wsgi.input_terminated"):  # chunked: werkzeug's reader stops at the last chunk
            return stream.read()
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        return body if len(body) == length else None

    def _call_app(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[bytes]]:
        answer: dict[str, Any] = {}
        written: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
            answer["status"], answer["headers"] = status, headers
            return written.append

        result = self.server.app(environ, start_response)
        try:
            written.extend(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return answer["status"], answer["headers"], written

    def _send(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        code = int(status.split(None, 1)[0])
        head = self.command == "HEAD"
        with_body = not head and code >= 200 and code not in _NO_BODY
        kept = [(k, v) for k, v in headers if k.lower() not in ("connection", "transfer-encoding")
                and (head or k.lower() != "content-length")]
        if with_body:
            kept.append(("Content-Length", str(len(body))))
        if self.close_connection:
            kept.append(("Connection", "close"))
        lines = [f"{self.protocol_version} {status}"] + [f"{k}: {v}" for k, v in kept]
        payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if with_body:
            payload += body
        self.wfile.write(payload)
        self.wfile.flush()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """No access log: a test run sends tens of thousands of requests (errors are still logged)."""
