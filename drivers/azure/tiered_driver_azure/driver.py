"""AzureDriver: segments as append blobs in one Azure Blob Storage container."""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from typing import Any, Callable, Iterator

from tiered_core.errors import DriverError, IllegalParam, InvalidOption, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi import Capabilities, RetryPolicy, SegmentDriver
from tiered_core.spi.transport import LOST_ANSWER, RequestProbe, is_transient

log = logging.getLogger("tiered_driver_azure")

#: Largest block one append_block call may carry (the append-blob limit of older API
#: versions and of Azurite; newer service versions accept more).
MAX_APPEND_BLOCK = 4 * 1024 * 1024


class AzureDriver(SegmentDriver):
    """Segments as append blobs below ``prefix`` in one container.

    ``write`` appends blocks of at most ``max_block_size`` bytes, each with
    ``appendpos_condition`` = its position, so the service itself rejects a stale writer
    (:class:`~tiered_core.errors.PositionMismatch` with the real size). A write larger
    than one block may land partially when it fails; ``size`` then tells how much.
    ``seal`` seals the append blob: later writes raise
    :class:`~tiered_core.errors.SegmentSealed`.

    Each request is sent once (the SDK's retries are off): transient failures (HTTP
    408/429/5xx, connection resets, timeouts) raise ``DriverError(retryable=True)``, and
    the retry layer ``open_driver`` adds repeats the operation when that is safe
    (``retries`` sets its count); 401/403 and a missing container raise
    ``DriverError(retryable=False)`` naming the container. ``connection_string``, ``credential`` and ``account_key`` are secrets: they
    never appear in ``repr``, ``describe`` or errors.

    Credentials, first that is given: ``connection_string``; ``account_key`` (with
    ``account_name``); ``credential`` (a SAS token or a credential object); otherwise
    ``DefaultAzureCredential`` (environment, managed identity, Azure CLI...).

    Every option is checked when the driver is made: a value of the wrong type (e.g. a TOML
    number for ``account_key``), a blank one, or an ``account_key`` that is not base64 raises
    :class:`~tiered_core.errors.InvalidOption` naming that option and what it must be (a
    secret's value is never shown); a client the SDK cannot build names the option it was
    built from.
    """

    name = "azure"
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, create_if_absent=True)
    secret_options = frozenset({"connection_string", "credential", "account_key"})
    location_options = ("account_name", "container", "prefix")

    def __init__(
        self, *, container: str, account_name: str | None = None, prefix: str = "",
        connection_string: str | None = None, credential: Any = None, account_key: str | None = None,
        endpoint: str | None = None, retries: int = 5, timeout: float = 60.0,
        max_block_size: int = MAX_APPEND_BLOCK,
    ) -> None:
        _check_options(container=container, account_name=account_name, prefix=prefix,
                       connection_string=connection_string, credential=credential, account_key=account_key,
                       endpoint=endpoint, retries=retries, timeout=timeout, max_block_size=max_block_size)
        if not container:
            raise InvalidOption("option 'container' of driver 'azure' is required", option="container")
        if retries < 0 or timeout <= 0:
            raise InvalidOption("options 'retries' (>= 0) and 'timeout' (> 0) of driver 'azure' are out of range",
                                option="retries" if retries < 0 else "timeout")
        if not 0 < max_block_size <= 100 * 1024 * 1024:
            raise InvalidOption(f"option 'max_block_size' of driver 'azure' must be in (0, 100 MiB], "
                                f"got {max_block_size}", option="max_block_size")
        if not (connection_string or endpoint or account_name):
            raise InvalidOption("driver 'azure' needs 'connection_string', 'endpoint' or 'account_name'",
                                option="account_name")
        self.container = container
        self.root = prefix.strip("/")
        self.retry_policy = RetryPolicy(retries=retries)
        self.timeout = timeout
        self.max_block_size = max_block_size
        #: Counts the HTTP requests sent, and lets a test hook intercept each one.
        self.transport = RequestProbe()
        self._service = self._make_service(connection_string, account_name, account_key, credential, endpoint)
        with self._built_from("container"):
            self._container = self._service.get_container_client(container)

    @contextlib.contextmanager
    def _built_from(self, option: str) -> Iterator[None]:
        """What the SDK raises while building from ``option`` as an InvalidOption naming it (the
        error's text only for an option that is not a secret: a malformed one must not be echoed)."""
        try:
            yield
        except (InvalidOption, DriverError):
            raise
        except Exception as exc:  # noqa: BLE001 - any SDK failure to build is a bad option
            why = type(exc).__name__ if option in self.secret_options else f"{type(exc).__name__}: {exc}"
            raise InvalidOption(f"driver 'azure': cannot build a client for container {self.container!r} from "
                                f"option {option!r}: {why}", option=option) from None

    def _make_service(self, connection_string, account_name, account_key, credential, endpoint):
        from azure.storage.blob import BlobServiceClient

        kwargs: dict[str, Any] = {
            "retry_total": 0,  # one request per call: the retry layer repeats operations
            "connection_timeout": min(self.timeout, 20.0),
            "read_timeout": self.timeout,
            "max_single_get_size": 256 * 1024 * 1024,  # one GET per read: no etag-pinned chunking
            "raw_request_hook": _RequestHook(self),  # runs once per HTTP request sent
            "raw_response_hook": _lose_answer_if_asked,
        }
        if connection_string:
            with self._built_from("connection_string"):
                return BlobServiceClient.from_connection_string(connection_string, **kwargs)
        url = endpoint or f"https://{account_name}.blob.core.windows.net"
        if account_key:
            from azure.core.credentials import AzureNamedKeyCredential

            name = account_name or url.rstrip("/").rsplit("/", 1)[-1]
            with self._built_from("account_key"):
                cred: Any = AzureNamedKeyCredential(name, account_key)
        elif credential is not None:
            cred = credential
        else:
            from azure.identity import DefaultAzureCredential  # lazy: heavy, only when needed

            with self._built_from("credential"):
                cred = DefaultAzureCredential()
        with self._built_from("endpoint" if endpoint else "account_name"):
            return BlobServiceClient(account_url=url, credential=cred, **kwargs)

    # -- helpers ---------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return f"{self.root}/{path}" if self.root else path

    def _blob(self, path: str):
        return self._container.get_blob_client(self._key(path))

    def _error(self, exc: Exception, action: str, path: str | None, **ctx: Any) -> DriverError:
        status, code = _status(exc)
        target = f"{path!r} in container {self.container!r}" if path else f"container {self.container!r}"
        if code == "ContainerNotFound":
            return DriverError(f"azure: container {self.container!r} does not exist (while trying to {action} "
                               f"{path!r})", retryable=False, container=self.container, path=path, status=status)
        if status in (401, 403) or _is_auth_error(exc):
            return DriverError(f"azure: access denied ({status or 'auth'}) to {action} {target}: check the "
                               f"credentials and role assignments", retryable=False,
                               container=self.container, path=path, status=status)
        retryable = _transient(exc, status)
        detail = f"HTTP {status} {code}".strip() if status else type(exc).__name__
        return DriverError(f"azure: cannot {action} {target}: {detail}", retryable=retryable,
                           container=self.container, path=path, status=status, **ctx)

    def _call(self, action: str, path: str | None, fn: Callable[[], Any],
              handle: Callable[[Exception, int, str], Any] | None = None) -> Any:
        """Call ``fn`` once; ``handle(exc, status, code)`` may return a value or raise a typed
        error for statuses the caller understands; any other failure becomes a DriverError
        (retryable when transient)."""
        try:
            return fn()
        except Exception as exc:
            status, code = _status(exc)
            if handle is not None:
                result = handle(exc, status, code)
                if result is not _UNHANDLED:
                    return result
            raise self._error(exc, action, path) from None

    def _props(self, path: str):
        blob = self._blob(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                return None
            return _UNHANDLED

        return self._call("look up", path, blob.get_blob_properties, handle)

    # -- the operations ---------------------------------------------------------------

    def size(self, path: str) -> int:
        props = self._props(path)
        return 0 if props is None else int(props.size)

    def exists(self, path: str) -> bool:
        return self._props(path) is not None

    def is_sealed(self, path: str) -> bool:
        props = self._props(path)
        return bool(props is not None and getattr(props, "is_append_blob_sealed", False))

    def create(self, path: str) -> None:
        from azure.core import MatchConditions

        blob = self._blob(path)

        def handle(exc, status, code):
            if status in (409, 412) and code in ("BlobAlreadyExists", "ConditionNotMet", ""):
                return None  # already there: create is idempotent
            return _UNHANDLED

        self._call("create", path, lambda: blob.create_append_blob(match_condition=MatchConditions.IfMissing),
                   handle)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """One block-blob upload with ``If-None-Match: *``: the service refuses it (409) when
        the blob exists. (After a lost answer, the retry layer recognises this call's own blob.)"""
        blob = self._blob(path)
        payload = bytes(data)

        def handle(exc, status, code):
            if status in (409, 412) and code in ("BlobAlreadyExists", "ConditionNotMet", ""):
                return False
            return _UNHANDLED

        result = self._call("create", path,
                            lambda: blob.upload_blob(payload, blob_type="BlockBlob", overwrite=False), handle)
        return result is not False

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        blob = self._blob(path)
        if not len(view):
            props = self._props(path)
            if props is not None and getattr(props, "is_append_blob_sealed", False):
                raise SegmentSealed(path)
            actual = 0 if props is None else int(props.size)
            if actual != position:
                raise PositionMismatch(path, position, actual)
            if props is None:
                self.create(path)
            return
        if position == 0:
            self.create(path)  # cheaper than a 404 from the first append
        done = 0
        while done < len(view):
            chunk = bytes(view[done:done + self.max_block_size])
            try:
                self._append(blob, path, position + done, chunk)
            except _Mismatch as mismatch:
                if done == 0:
                    raise PositionMismatch(path, position, mismatch.actual) from None
                raise DriverError(
                    f"azure: {path!r} in container {self.container!r} grew under this write: {done} of "
                    f"{len(view)} bytes landed at {position}, then the size was {mismatch.actual}",
                    retryable=True, container=self.container, path=path, position=position,
                ) from None
            done += len(chunk)

    def _append(self, blob, path: str, pos: int, chunk: bytes) -> None:
        state = {"created": False}

        def handle(exc, status, code):
            if code == "BlobIsSealed":
                raise SegmentSealed(path) from None
            if status == 404 and code == "BlobNotFound" and pos == 0 and not state["created"]:
                self.create(path)
                state["created"] = True
                return _AGAIN
            if status == 404 and code == "BlobNotFound":
                raise _Mismatch(0) from None
            if status == 412 and code in ("AppendPositionConditionNotMet", ""):
                raise _Mismatch(self.size(path)) from None
            return _UNHANDLED

        while True:
            result = self._call(
                f"append at {pos} to", path,
                lambda: blob.append_block(chunk, length=len(chunk), appendpos_condition=pos), handle,
            )
            if result is not _AGAIN:
                return

    def read(self, path: str, position: int, length: int) -> bytes:
        blob = self._blob(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                raise NotFound(path) from None
            if status == 416:
                return b""
            return _UNHANDLED

        body = self._call("read", path, lambda: blob.download_blob(offset=position, length=length).readall(), handle)
        if len(body) != length:
            raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size "
                               f"{self.size(path)}", path=path, position=position, length=length)
        return body

    def seal(self, path: str) -> None:
        blob = self._blob(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                raise NotFound(path, "cannot be sealed: it does not exist") from None
            if code == "BlobIsSealed":
                return None
            return _UNHANDLED

        self._call("seal", path, blob.seal_append_blob, handle)

    def delete(self, path: str) -> None:
        blob = self._blob(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                return None
            return _UNHANDLED

        self._call("delete", path, blob.delete_blob, handle)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        full = f"{self.root}/{prefix}" if self.root else prefix
        cut = len(self.root) + 1 if self.root else 0

        def fetch():
            return sorted((b.name[cut:], int(b.size)) for b in self._container.list_blobs(name_starts_with=full))

        return iter(self._call("list prefix", prefix, fetch))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._service.close()


class _Mismatch(Exception):
    def __init__(self, actual: int) -> None:
        self.actual = actual


_UNHANDLED = object()
_AGAIN = object()


class _InjectedFault(Exception):
    """Raised by the fault hook's status: looks like an HTTP error with ``status_code``."""

    def __init__(self, status: int) -> None:
        super().__init__(f"injected HTTP {status}")
        self.status_code = status
        self.error_code = ""


#: What each option must be, as errors say it: (accepted types, the text).
_OPTION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "container": ((str,), "a container name (a string)"),
    "account_name": ((str,), "a storage account name (a string)"),
    "prefix": ((str,), "a blob name prefix (a string)"),
    "connection_string": ((str,), "a connection string (a string)"),
    "account_key": ((str,), "the storage account's access key (a base64 string)"),
    "endpoint": ((str,), "a blob service URL (a string)"),
    "retries": ((int,), "an int >= 0"),
    "timeout": ((int, float), "a number of seconds > 0"),
    "max_block_size": ((int,), "an int of bytes"),
}


def _check_options(**options: Any) -> None:
    """InvalidOption naming the first option whose value has the wrong type, is blank, or (the
    account key) is not base64; a secret's value is described, never shown."""
    for name, value in options.items():
        if value is None or name not in _OPTION_TYPES:
            continue  # not given (credential: a SAS string or any credential object)
        kinds, text = _OPTION_TYPES[name]
        secret = name in AzureDriver.secret_options
        kind = type(value).__name__
        kind = ("an " if kind[:1] in "aeiou" else "a ") + kind
        shown = kind if secret else f"{value!r} ({kind})"
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise InvalidOption(f"option {name!r} of driver 'azure' must be {text}, got {shown}", option=name)
        if isinstance(value, str) and name != "prefix" and (not value.strip() or value != value.strip()):
            got = "a blank or padded string" if secret else repr(value)
            raise InvalidOption(f"option {name!r} of driver 'azure' must be {text} without blanks around it, "
                                f"got {got}", option=name)
    key = options.get("account_key")
    if key is not None:
        try:
            base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidOption("option 'account_key' of driver 'azure' must be the storage account's access "
                                "key, a base64 string (as the portal shows it); the value given is not base64",
                                option="account_key") from None
    credential = options.get("credential")
    if isinstance(credential, str) and not credential.strip():
        raise InvalidOption("option 'credential' of driver 'azure' must be a SAS token or a credential "
                            "object, got a blank string", option="credential")


class _RequestHook:
    """Called by the SDK for each HTTP request it sends: passes it through the probe."""

    def __init__(self, driver: AzureDriver) -> None:
        self._driver = driver

    def __call__(self, request) -> None:
        http = request.http_request
        # The path plus the operation (?comp=...); never the rest of the query (a SAS).
        base, _, query = http.url.partition("?")
        comp = [q for q in query.split("&") if q.startswith("comp=")]
        fault = self._driver.transport.before(http.method, base + ("?" + comp[0] if comp else ""))
        if fault == LOST_ANSWER:
            request.context["tiered_lost_answer"] = True
        elif fault is not None:
            raise _InjectedFault(int(fault))


def _lose_answer_if_asked(response) -> None:
    if response.context.get("tiered_lost_answer"):
        raise RequestProbe.answer_lost()


def _status(exc: Exception) -> tuple[int, str]:
    status = getattr(exc, "status_code", None) or 0
    code = getattr(exc, "error_code", None) or ""
    code = getattr(code, "value", code)  # StorageErrorCode is an enum
    if not code:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        code = headers.get("x-ms-error-code", "") if hasattr(headers, "get") else ""
    return int(status), str(code)


def _is_auth_error(exc: Exception) -> bool:
    from azure.core.exceptions import ClientAuthenticationError

    try:
        from azure.identity import CredentialUnavailableError
    except ImportError:  # pragma: no cover - azure-identity is a dependency
        CredentialUnavailableError = ClientAuthenticationError
    return isinstance(exc, (ClientAuthenticationError, CredentialUnavailableError))


def _transient(exc: Exception, status: int) -> bool:
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError

    if status:
        return is_transient(status)
    return isinstance(exc, (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError))

