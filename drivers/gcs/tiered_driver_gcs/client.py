"""A small client for the GCS JSON API: its own aiohttp session, google-auth credentials.

Only public APIs: google-auth for the credential chain (or an explicit token), aiohttp
for HTTP -- one session per client, on a process-wide I/O loop thread, so calls from
many threads share connections.

One request per call, never retried here: the retry layer above the driver repeats a
whole operation when that is safe. A transient status (:func:`is_transient`) or a
connection failure raises ``DriverError(retryable=True)``; any other status is handed
back to the caller, who knows what a 404 or 412 means. Every request passes the client's
:class:`~tiered_core.spi.transport.RequestProbe` (``transport``): counted, and open to a
test hook.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import quote

from tiered_core.errors import DriverError, InvalidOption
from tiered_core.spi.transport import LOST_ANSWER, RequestProbe, is_transient

log = logging.getLogger("tiered_driver_gcs")

DEFAULT_LOCATION = "https://storage.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
_INJECTED = b'{"error": {"message": "injected fault"}}'


@dataclass
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}

    def error_message(self) -> str:
        try:
            err = json.loads(self.body).get("error", {})
            return str(err.get("message", "")) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            return self.body[:200].decode("utf-8", "replace")


def location(endpoint: str | None) -> str:
    """The service's base URL: ``endpoint``, else ``STORAGE_EMULATOR_HOST``, else GCS."""
    if endpoint:
        return endpoint.rstrip("/")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator not in ("", "default"):
        return (emulator if "://" in emulator else f"http://{emulator}").rstrip("/")
    return DEFAULT_LOCATION


def load_credentials(token: Any) -> Any:
    """google-auth credentials for ``token``, or None for anonymous access.

    ``token``: None (the standard chain -- ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
    application-default credentials, the metadata server -- else anonymous),
    ``"google_default"`` (the standard chain, required), ``"cloud"`` (the metadata
    server), ``"anon"``, a path to a service-account or authorized-user JSON file, the
    parsed JSON as a dict, or a credentials object.
    """
    import google.auth
    import google.auth.credentials
    import google.auth.exceptions

    if token is None:
        try:
            return google.auth.default(scopes=[SCOPE])[0]
        except google.auth.exceptions.DefaultCredentialsError:
            log.info("gcs: no Google credentials found; using anonymous access")
            return None
    if isinstance(token, google.auth.credentials.Credentials):
        return token
    if token == "anon":
        return None
    if token == "google_default":
        return google.auth.default(scopes=[SCOPE])[0]
    if token == "cloud":
        import google.auth.compute_engine

        return google.auth.compute_engine.Credentials()
    if isinstance(token, dict):
        return google.auth.load_credentials_from_dict(token, scopes=[SCOPE])[0]
    if isinstance(token, str) and os.path.isfile(token):
        return google.auth.load_credentials_from_file(token, scopes=[SCOPE])[0]
    # Never echo the value: it may be a credential itself.
    raise InvalidOption("option 'token' of driver 'gcs' is not a JSON key file, 'google_default', 'cloud', "
                        "'anon', a dict or a credentials object", option="token")


class _IoLoop:
    """One asyncio loop in a daemon thread for every client of the process (a new one
    after a fork: the thread does not survive it)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="tiered-gcs-io", daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop


class GcsClient:
    """JSON API calls against one bucket. Thread-safe."""

    def __init__(self, *, bucket: str, token: Any, endpoint: str | None, timeout: float) -> None:
        self.bucket = bucket
        self.timeout = timeout
        self.location = location(endpoint)
        self.credentials = load_credentials(token)
        self.transport = RequestProbe()
        self._loop = _IoLoop.get()
        self._session: Any = None
        self._auth_lock = threading.Lock()

    # -- URLs -----------------------------------------------------------------------

    def object_url(self, key: str, *, upload: bool = False, suffix: str = "") -> str:
        if upload:
            return f"{self.location}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o"
        return f"{self.location}/storage/v1/b/{quote(self.bucket, safe='')}/o/{quote(key, safe='')}{suffix}"

    def objects_url(self) -> str:
        return f"{self.location}/storage/v1/b/{quote(self.bucket, safe='')}/o"

    # -- sending --------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if self.credentials is None:
            return {}
        headers: dict[str, str] = {}
        with self._auth_lock:  # refreshing is not thread-safe
            if not self.credentials.valid:
                import google.auth.transport.requests

                self.credentials.refresh(google.auth.transport.requests.Request())
            self.credentials.apply(headers)
        return headers

    def request(
        self, method: str, url: str, *, what: str, params: Mapping[str, Any] | None = None,
        data: bytes | None = None, headers: Mapping[str, str] | None = None, json_body: Any = None,
    ) -> Response:
        """Send once. A transient status or a connection failure raises a retryable
        ``DriverError``; any other status is returned. ``what`` names the operation and
        object for messages (never credentials)."""
        try:
            fault = self.transport.before(method, what)
            if fault is not None and fault != LOST_ANSWER:
                status, body = int(fault), _INJECTED
            else:
                hdrs = {**self._auth_headers(), **(headers or {})}
                if json_body is not None:
                    data = json.dumps(json_body).encode()
                    hdrs["Content-Type"] = "application/json"
                query = {k: str(v) for k, v in (params or {}).items()}
                future = asyncio.run_coroutine_threadsafe(self._send(method, url, query, data, hdrs), self._loop)
                try:
                    status, body = future.result(self.timeout + 5)
                except BaseException:
                    future.cancel()
                    raise
                if fault == LOST_ANSWER:
                    raise self.transport.answer_lost()
        except (DriverError, InvalidOption):
            raise
        except Exception as exc:  # connection reset, timeout, DNS, refresh failure... transient here
            failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise DriverError(f"gcs: {what} in bucket {self.bucket!r} failed: {failure}", retryable=True,
                              bucket=self.bucket) from None
        if is_transient(status):
            raise DriverError(f"gcs: {what} in bucket {self.bucket!r} failed: HTTP {status} "
                              f"{Response(status, body).error_message()}".rstrip(),
                              retryable=True, bucket=self.bucket, status=status)
        return Response(status, body)

    async def _send(self, method: str, url: str, params: dict[str, str], data: bytes | None,
                    headers: dict[str, str]) -> tuple[int, bytes]:
        import aiohttp

        if self._session is None:  # made on the loop it belongs to
            self._session = aiohttp.ClientSession()
        async with self._session.request(method, url, params=params, data=data, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
            return resp.status, await resp.read()

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
                if_generation_match: int | None) -> Response:
        params = {} if if_generation_match is None else {"ifGenerationMatch": if_generation_match}
        return self.request(
            "POST", self.object_url(key, suffix="/compose"), what=what, params=params,
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
        session, self._session = self._session, None
        if session is not None:
            try:
                asyncio.run_coroutine_threadsafe(session.close(), self._loop).result(10)
            except Exception:  # closing is best effort
                pass
