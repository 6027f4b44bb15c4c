"""A small client for the GCS JSON API, on gcsfs's credentials and aiohttp session.

gcsfs gives us the standard Google credential chain (or an explicit token), the
endpoint (``STORAGE_EMULATOR_HOST`` or an explicit one) and a pooled aiohttp session.
The requests themselves are made here, so that this module alone decides what is
retried: transient failures (HTTP 408/429/5xx, connection resets, timeouts) are retried
with bounded exponential backoff and then raised as ``DriverError(retryable=True)``;
every other status is handed back to the caller, who knows what a 404 or 412 means.

``fault_hook`` (tests only) sees every request before it is sent and may make it fail
with an HTTP status or an exception; ``requests`` counts the requests sent.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import quote

from tiered_core.errors import DriverError

log = logging.getLogger("tiered_driver_gcs")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

#: ``fault_hook(method, what)`` may return an HTTP status (the request then fails with it
#: without reaching the server), :data:`LOST_ANSWER` (the request is carried out but its
#: answer is lost: a connection reset), or raise (a connection failure); None = send.
FaultHook = Callable[[str, str], "int | str | None"]
LOST_ANSWER = "lost-answer"


@dataclass
class Response:
    status: int
    body: bytes
    attempts: int

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    @property
    def retried(self) -> bool:
        return self.attempts > 1

    def error_message(self) -> str:
        try:
            err = json.loads(self.body).get("error", {})
            return str(err.get("message", "")) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            return self.body[:200].decode("utf-8", "replace")


class GcsClient:
    """JSON API calls against one bucket. Thread-safe: calls run on gcsfs's event loop."""

    def __init__(
        self, *, bucket: str, project: str | None, token: Any, endpoint: str | None,
        retries: int, timeout: float, backoff: float = 0.05, max_backoff: float = 2.0,
    ) -> None:
        from gcsfs.core import GCSFileSystem  # the core class: no experimental HNS probing

        self.bucket = bucket
        self.retries = max(0, retries)
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        kwargs: dict[str, Any] = {"token": token, "endpoint_url": endpoint, "skip_instance_cache": True}
        if project:
            kwargs["project"] = project
        self.fs = GCSFileSystem(**kwargs)
        self.fault_hook: FaultHook | None = None
        self._count = itertools.count()
        self._sent = 0
        self._lock = threading.Lock()

    # -- bookkeeping ----------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Requests sent (or failed by the fault hook) since creation."""
        with self._lock:
            return self._sent

    def _counted(self) -> None:
        with self._lock:
            self._sent += 1

    @property
    def location(self) -> str:
        return self.fs._location

    def object_url(self, key: str, *, upload: bool = False, suffix: str = "") -> str:
        base = f"{self.location}/upload/storage/v1" if upload else f"{self.location}/storage/v1"
        if upload:
            return f"{base}/b/{quote(self.bucket, safe='')}/o"
        return f"{base}/b/{quote(self.bucket, safe='')}/o/{quote(key, safe='')}{suffix}"

    def objects_url(self) -> str:
        return f"{self.location}/storage/v1/b/{quote(self.bucket, safe='')}/o"

    # -- sending --------------------------------------------------------------------

    def request(
        self, method: str, url: str, *, what: str, params: Mapping[str, Any] | None = None,
        data: bytes | None = None, headers: Mapping[str, str] | None = None, json_body: Any = None,
        retries: int | None = None,
    ) -> Response:
        """Send with retries of transient failures; any other status is returned.

        ``what`` names the operation and object for messages (never credentials).
        ``retries`` overrides the client's count (0 for calls that are not idempotent).
        """
        from fsspec.asyn import sync

        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            attempt += 1
            try:
                status, body = sync(
                    self.fs.loop, self._send, method, url, what, params, data, headers, json_body,
                    timeout=self.timeout + 5,
                )
                if status not in TRANSIENT_STATUS:
                    return Response(status, body, attempt)
                failure = f"HTTP {status}"
            except DriverError:
                raise
            except Exception as exc:  # connection reset, timeout, DNS... all transient here
                failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt > retries:
                raise DriverError(
                    f"gcs: {what} in bucket {self.bucket!r} failed after {attempt} attempts: {failure}",
                    retryable=True, bucket=self.bucket, attempts=attempt,
                )
            delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1))) * (0.5 + random.random() / 2)
            log.debug("gcs: %s failed (%s); retry %d in %.2fs", what, failure, attempt, delay)
            time.sleep(delay)

    async def _send(self, method, url, what, params, data, headers, json_body) -> tuple[int, bytes]:
        import aiohttp

        self._counted()
        fault = self.fault_hook(method, what) if self.fault_hook is not None else None
        if fault is not None and fault != LOST_ANSWER:
            return int(fault), b'{"error": {"message": "injected fault"}}'
        await self.fs._set_session()
        hdrs = self.fs._get_headers(dict(headers or {}))
        body = data
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        async with self.fs.session.request(
            method, url, params={k: str(v) for k, v in (params or {}).items()}, data=body,
            headers=hdrs, timeout=aiohttp.ClientTimeout(total=self.timeout),
        ) as resp:
            body = await resp.read()
        if fault == LOST_ANSWER:
            raise ConnectionResetError("injected: answer lost after the request was carried out")
        return resp.status, body

    # -- JSON API operations ----------------------------------------------------------

    def upload(self, key: str, data: bytes, metadata: Mapping[str, str] | None, *, what: str,
               if_generation_match: int | None = None) -> Response:
        """Multipart upload of a whole object (one request)."""
        boundary = f"tiered-{uuid.uuid4().hex}"
        meta = {"name": key, "contentType": "application/octet-stream"}
        if metadata:
            meta["metadata"] = dict(metadata)
        body = b"".join([
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            json.dumps(meta).encode(),
            f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            data,
            f"\r\n--{boundary}--\r\n".encode(),
        ])
        params: dict[str, Any] = {"uploadType": "multipart"}
        if if_generation_match is not None:
            params["ifGenerationMatch"] = if_generation_match
        return self.request(
            "POST", self.object_url(key, upload=True), what=what, params=params, data=body,
            headers={"Content-Type": f"multipart/related; boundary={boundary}"},
        )

    def compose(self, key: str, sources: list[str], metadata: Mapping[str, str], *, what: str,
                if_generation_match: int | None, retries: int | None = None) -> Response:
        params = {} if if_generation_match is None else {"ifGenerationMatch": if_generation_match}
        return self.request(
            "POST", self.object_url(key, suffix="/compose"), what=what, params=params, retries=retries,
            json_body={
                "sourceObjects": [{"name": s} for s in sources],
                "destination": {"contentType": "application/octet-stream", "metadata": dict(metadata)},
            },
        )

    def patch_metadata(self, key: str, metadata: Mapping[str, str], *, what: str,
                       if_generation_match: int | None) -> Response:
        params = {} if if_generation_match is None else {"ifGenerationMatch": if_generation_match}
        return self.request("PATCH", self.object_url(key), what=what, params=params,
                            json_body={"metadata": dict(metadata)})

    def get_object(self, key: str, *, what: str) -> Response:
        return self.request("GET", self.object_url(key), what=what)

    def download(self, key: str, start: int, length: int, *, what: str) -> Response:
        return self.request(
            "GET", self.object_url(key), what=what, params={"alt": "media"},
            headers={"Range": f"bytes={start}-{start + length - 1}"},
        )

    def delete(self, key: str, *, what: str, if_generation_match: int | None = None) -> Response:
        params = {} if if_generation_match is None else {"ifGenerationMatch": if_generation_match}
        return self.request("DELETE", self.object_url(key), what=what, params=params)

    def list(self, prefix: str, *, what: str) -> tuple[int, list[dict[str, Any]], str]:
        """All objects under ``prefix`` (every page). Returns (status, items, error message)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            params: dict[str, Any] = {"prefix": prefix, "maxResults": 1000,
                                      "fields": "items(name,size,generation,metadata,md5Hash),nextPageToken"}
            if token:
                params["pageToken"] = token
            resp = self.request("GET", self.objects_url(), what=what, params=params)
            if resp.status != 200:
                return resp.status, [], resp.error_message()
            page = resp.json()
            items.extend(page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                return 200, items, ""

    def close(self) -> None:
        try:
            from fsspec.asyn import sync

            if self.fs._session is not None:
                sync(self.fs.loop, self.fs._session.close, timeout=10)
                self.fs._session = None
        except Exception:  # closing is best effort
            pass
