"""AzureDriver: segments as append blobs in one Azure Blob Storage container, through adlfs."""

from __future__ import annotations

import base64
import binascii
import contextlib
import inspect
import logging
import os
import urllib.parse
from typing import Any, Callable, Iterator

from tiered_core.errors import (
    DriverError, IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed, StateConflict,
)
from tiered_core.spi import Capabilities, RetryPolicy, SegmentDriver
from tiered_core.spi.driver import key_prefix
from tiered_core.spi.objectstore import PART_MARK
from tiered_core.spi.transport import LOST_ANSWER, RequestHookPoint, is_transient

log = logging.getLogger("tiered_driver_azure")

#: Largest block one append_block call may carry (the append-blob limit of older API
#: versions and of Azurite; newer service versions accept more).
MAX_APPEND_BLOCK = 4 * 1024 * 1024

#: The ways to authenticate, in the order adlfs's ``do_connect`` tries them; each with the
#: options that make it up.
_AUTH_KINDS: tuple[tuple[str, ...], ...] = (
    ("connection_string",), ("credential", "account_key"), ("sas_token",),
    ("client_id", "client_secret", "tenant_id"),
)
#: The environment variables adlfs reads for an option that is not given.
_ENV = {
    "connection_string": "AZURE_STORAGE_CONNECTION_STRING", "account_name": "AZURE_STORAGE_ACCOUNT_NAME",
    "account_key": "AZURE_STORAGE_ACCOUNT_KEY", "sas_token": "AZURE_STORAGE_SAS_TOKEN",
    "client_id": "AZURE_STORAGE_CLIENT_ID", "client_secret": "AZURE_STORAGE_CLIENT_SECRET",
    "tenant_id": "AZURE_STORAGE_TENANT_ID",
}


class AzureDriver(SegmentDriver):
    """Segments as append blobs below ``prefix`` in one container.

    ``write`` appends blocks of at most ``max_block_size`` bytes, each with
    ``appendpos_condition`` = its position, so the service itself rejects a stale writer
    (:class:`~tiered_core.errors.PositionMismatch` with the real size). A write larger
    than one block may land partially when it fails; ``size`` then tells how much.
    ``seal`` seals the append blob: later writes raise
    :class:`~tiered_core.errors.SegmentSealed`. ``write_if_absent`` makes a block blob.

    **adlfs owns the session and the authentication**: the driver opens an
    ``adlfs.AzureBlobFileSystem`` (its event loop, its credential chain: ``connection_string``;
    ``account_name`` with ``credential`` or ``account_key``; ``sas_token``; a service principal,
    ``client_id`` + ``client_secret`` + ``tenant_id``; otherwise ``DefaultAzureCredential``
    unless ``anon``; options not given are read from adlfs's ``AZURE_STORAGE_*`` environment
    variables). ``write_if_absent`` is adlfs's ``pipe_file(overwrite=False)``, ``read`` its
    ``cat_file`` and ``delete`` its ``rm_file``. Through adlfs's public ``fs.service_client``
    (the aio ``BlobServiceClient``, driven on ``fs.loop``) go only the calls adlfs cannot
    express:

    * ``append_block(appendpos_condition=position)`` for ``write``: adlfs's ``"ab"`` mode
      appends unconditionally, so it could not fence a stale writer;
    * ``create_append_blob(match_condition=IfMissing)`` for ``create``: adlfs makes block
      blobs, or append blobs only through that unconditional mode;
    * ``seal_append_blob`` for ``seal``: adlfs has no seal;
    * ``get_blob_properties`` for ``size``/``exists``/``is_sealed``: adlfs's ``info`` has no
      seal flag, and answers a missing container with "no such file" (an empty segment);
    * ``list_blobs(name_starts_with=...)`` for ``list``: adlfs's ``find`` answers a missing
      container with an empty listing and cuts a prefix at ``/``.

    That client is adlfs's own, rebuilt once from its URL and credential with the driver's
    pipeline: the SDK's retries off (``retry_total=0``), ``timeout`` as connect/read
    timeouts, one GET per read, and the request hook point (``transport``) on every request,
    adlfs's included. So each request is sent once: transient failures (HTTP 408/429/5xx,
    connection resets, timeouts) raise ``DriverError(retryable=True)``, and the retry layer
    ``open_driver`` adds repeats the operation when that is safe (``retries`` sets its
    count); 401/403 and a missing container raise ``DriverError(retryable=False)`` naming
    the container.

    ``connection_string``, ``credential``, ``account_key``, ``sas_token`` and
    ``client_secret`` are secrets: they never appear in ``repr``, ``describe``, errors or logs.
    Every option is checked when the driver is made: a value of the wrong type (e.g. a TOML
    number for ``account_key``), a blank one, an ``account_key`` that is not base64, two ways
    to authenticate at once, or an ``AZURE_STORAGE_*`` variable that adlfs would prefer to
    the option given raises :class:`~tiered_core.errors.InvalidOption` naming that option
    and what it must be (a secret's value is never shown); a client that cannot be built
    names the option it was built from.
    """

    name = "azure"
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, create_if_absent=True)
    secret_options = frozenset({"connection_string", "credential", "account_key", "sas_token", "client_secret"})
    location_options = ("account_name", "container", "prefix")

    def __init__(
        self, *, container: str, account_name: str | None = None, prefix: str = "",
        connection_string: str | None = None, credential: Any = None, account_key: str | None = None,
        sas_token: str | None = None, client_id: str | None = None, client_secret: str | None = None,
        tenant_id: str | None = None, anon: bool | None = None,
        endpoint: str | None = None, retries: int = 5, timeout: float = 60.0,
        max_block_size: int = MAX_APPEND_BLOCK,
    ) -> None:
        auth = {"connection_string": connection_string, "credential": credential, "account_key": account_key,
                "sas_token": sas_token, "client_id": client_id, "client_secret": client_secret,
                "tenant_id": tenant_id}
        _check_options(container=container, account_name=account_name, prefix=prefix, endpoint=endpoint,
                       retries=retries, timeout=timeout, max_block_size=max_block_size, anon=anon, **auth)
        if not container:
            raise InvalidOption("option 'container' of driver 'azure' is required", option="container")
        if not all(c.islower() or c.isdigit() or c in "-$" for c in container) or not container.isascii():
            raise InvalidOption(f"option 'container' of driver 'azure' must be a container name (lower-case letters, "
                                f"digits and '-'; a key prefix goes into option 'prefix'), got {container!r}",
                                option="container", value=container)
        if retries < 0 or timeout <= 0:
            raise InvalidOption("options 'retries' (>= 0) and 'timeout' (> 0) of driver 'azure' are out of range",
                                option="retries" if retries < 0 else "timeout")
        if not 0 < max_block_size <= 100 * 1024 * 1024:
            raise InvalidOption(f"option 'max_block_size' of driver 'azure' must be in (0, 100 MiB], "
                                f"got {max_block_size}", option="max_block_size")
        _check_auth(auth, account_name, endpoint)
        self.container = container
        self.root = key_prefix(prefix, driver="azure")
        self.retry_policy = RetryPolicy(retries=retries)
        self.timeout = timeout
        self.max_block_size = max_block_size
        #: Every HTTP request passes it (tests and benchmarks install their probe there).
        self.transport = RequestHookPoint()
        #: Texts scrubbed from a cause shown in an error (a key, a SAS, a client secret).
        self._secrets = _secret_texts(auth)
        self._fs = self._open_fs(auth, account_name, endpoint, anon)
        #: scheme://host[:port] of the blob service, the only part of its URL errors show.
        self.endpoint_shown = _endpoint_shown(self._fs.service_client.url)

    @contextlib.contextmanager
    def _built_from(self, option: str, *, secret: bool = False) -> Iterator[None]:
        """What adlfs or the SDK raises while building from ``option`` as an InvalidOption naming
        it (the error's text only for an option that is not a secret, nor built with one: a
        malformed one must not be echoed)."""
        try:
            yield
        except (InvalidOption, DriverError):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to build is a bad option
            hide = secret or option in self.secret_options
            why = type(exc).__name__ if hide else f"{type(exc).__name__}: {exc}"
            raise InvalidOption(f"driver 'azure': cannot build a client for container {self.container!r} from "
                                f"option {option!r}: {why}", option=option) from None

    def _open_fs(self, auth: dict[str, Any], account_name: str | None, endpoint: str | None, anon: bool | None):
        """adlfs's file system (its loop and credential chain) with the driver's own pipeline."""
        import adlfs
        from azure.storage.blob.aio import BlobServiceClient

        given = [k for k, v in auth.items() if v is not None]
        source = given[0] if given else ("endpoint" if endpoint else "account_name")
        if account_name is None and endpoint and not auth["connection_string"]:
            account_name = _account_from_url(endpoint)  # adlfs needs a name; the URL has it
        kwargs = {k: v for k, v in auth.items() if v is not None}
        with self._built_from(source):
            fs = adlfs.AzureBlobFileSystem(
                account_name=account_name, anon=anon, skip_instance_cache=True, use_listings_cache=False, **kwargs)
        built = fs.service_client
        url = built.url
        if endpoint:  # adlfs builds https://{account}.blob.core.windows.net; keep its query (a SAS)
            query = url.partition("?")[2]
            url = endpoint.rstrip("/") + (f"?{query}" if query else "")
        with self._built_from("endpoint" if endpoint else source, secret="?" in url):  # a SAS in the URL
            own = BlobServiceClient(
                account_url=url, credential=built.credential,
                retry_total=0,  # one request per call: the retry layer repeats operations
                connection_timeout=min(self.timeout, 20.0), read_timeout=self.timeout,
                max_single_get_size=256 * 1024 * 1024,  # one GET per read: no etag-pinned chunking
                raw_request_hook=_RequestHook(self),  # runs once per HTTP request sent
                raw_response_hook=_lose_answer_if_asked,
                user_agent=f"adlfs/{adlfs.__version__} tiered-store",
                use_env_settings=_proxy_in_environment(),
            )
        _run(fs, built.close)  # adlfs's own client sent nothing yet
        fs.service_client = own
        return fs

    # -- helpers ---------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return f"{self.root}/{path}" if self.root else path

    def _fs_path(self, path: str) -> str:
        """``container/key`` for adlfs, which must address exactly that blob."""
        full = f"{self.container}/{self._key(path)}"
        if tuple(self._fs.split_path(full)[:2]) != (self.container, self._key(path)):
            raise InvalidPath(f"azure: path {path!r} cannot be addressed through adlfs (it reads "
                              f"'?versionid=' as a blob version)", path=path)
        return full

    def _blob(self, path: str):
        return self._fs.service_client.get_blob_client(self.container, self._key(path))

    def _error(self, exc: BaseException, action: str, path: str | None, **ctx: Any) -> DriverError:
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
        detail = f"HTTP {status} {code}".strip() if status else type(_cause(exc)).__name__
        if not status and retryable:  # no answer: say which endpoint, and why (refused, no such host, timeout)
            why, host = _why_unreachable(exc)
            where = f"endpoint {self.endpoint_shown}"
            if host and host != _host_port(self._fs.service_client.url):  # e.g. the credential's token authority
                where = f"{host} (the blob endpoint is {self.endpoint_shown})"
            detail += f": no answer from {where}: {self._scrub(why)}"
            ctx.setdefault("endpoint", self.endpoint_shown)
        return DriverError(f"azure: cannot {action} {target}: {detail}", retryable=retryable,
                           container=self.container, path=path, status=status, **ctx)

    def _scrub(self, text: str) -> str:
        for value in self._secrets:
            text = text.replace(value, "***")
        return text

    def _call(self, action: str, path: str | None, fn: Callable[[], Any],
              handle: Callable[[BaseException, int, str], Any] | None = None) -> Any:
        """Call ``fn`` once; ``handle(exc, status, code)`` may return a value or raise a typed
        error for statuses the caller understands; any other failure becomes a DriverError
        (retryable when transient)."""
        try:
            return fn()
        except (DriverError, InvalidPath, IllegalParam):
            raise
        except Exception as exc:
            status, code = _status(exc)
            if handle is not None:
                result = handle(exc, status, code)
                if result is not _UNHANDLED:
                    return result
            raise self._error(exc, action, path) from None

    def _sdk(self, action: str, path: str | None, make: Callable[[], Any],
             handle: Callable[[BaseException, int, str], Any] | None = None) -> Any:
        """Await the coroutine ``make()`` builds (a call of ``fs.service_client``) on adlfs's loop."""
        return self._call(action, path, lambda: _run(self._fs, make), handle)

    def _props(self, path: str):
        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                return None
            return _UNHANDLED

        return self._sdk("look up", path, lambda: self._blob(path).get_blob_properties(), handle)

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

        def handle(exc, status, code):
            if status in (409, 412) and code in ("BlobAlreadyExists", "ConditionNotMet", ""):
                return None  # already there: create is idempotent
            return _UNHANDLED

        self._sdk("create", path,
                  lambda: self._blob(path).create_append_blob(match_condition=MatchConditions.IfMissing), handle)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """adlfs's ``pipe_file(overwrite=False)``: one block-blob upload with ``If-None-Match: *``,
        which the service refuses (409) when the blob exists. (After a lost answer, the retry
        layer recognises this call's own blob.)"""
        target = self._fs_path(path)
        payload = bytes(data)

        def handle(exc, status, code):
            if isinstance(exc, FileExistsError) or (status in (409, 412) and code in (
                    "BlobAlreadyExists", "ConditionNotMet", "")):
                return False
            return _UNHANDLED

        result = self._call("create", path, lambda: self._fs.pipe_file(target, payload, overwrite=False), handle)
        return result is not False

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
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
                self._append(path, position + done, chunk)
            except _Mismatch as mismatch:
                if done == 0:
                    raise PositionMismatch(path, position, mismatch.actual) from None
                raise DriverError(
                    f"azure: {path!r} in container {self.container!r} grew under this write: {done} of "
                    f"{len(view)} bytes landed at {position}, then the size was {mismatch.actual}",
                    retryable=True, container=self.container, path=path, position=position,
                ) from None
            done += len(chunk)

    def _append(self, path: str, pos: int, chunk: bytes) -> None:
        state = {"created": False}

        def handle(exc, status, code):
            if code == "BlobIsSealed":
                raise SegmentSealed(path) from None
            if code == "InvalidBlobType":
                raise self._not_an_append_blob(path, f"append at {pos} to") from None
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
            result = self._sdk(
                f"append at {pos} to", path,
                lambda: self._blob(path).append_block(chunk, length=len(chunk), appendpos_condition=pos), handle,
            )
            if result is not _AGAIN:
                return

    def read(self, path: str, position: int, length: int) -> bytes:
        target = self._fs_path(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                raise NotFound(path) from None
            if status == 416:
                return b""
            return _UNHANDLED

        body = self._call("read", path, lambda: self._fs.cat_file(target, start=position, end=position + length),
                          handle)
        if len(body) != length:
            raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size "
                               f"{self.size(path)}", path=path, position=position, length=length)
        return body

    def seal(self, path: str) -> None:
        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                raise NotFound(path, "cannot be sealed: it does not exist") from None
            if code == "BlobIsSealed":
                return None
            if code == "InvalidBlobType":
                raise self._not_an_append_blob(path, "seal") from None
            return _UNHANDLED

        self._sdk("seal", path, lambda: self._blob(path).seal_append_blob(), handle)

    def _not_an_append_blob(self, path: str, action: str) -> DriverError:
        # A segment restored with a plain upload (azcopy's and the CLI's default blob type).
        return DriverError(
            f"azure: cannot {action} {path!r} in container {self.container!r}: it is a block blob, and a segment "
            "must be an append blob (was it restored or copied in by hand?). Restore it as an append blob with "
            "the same bytes; nothing was changed", retryable=False, container=self.container, path=path,
            service_code="InvalidBlobType")

    def delete(self, path: str) -> None:
        target = self._fs_path(path)

        def handle(exc, status, code):
            if status == 404 and code != "ContainerNotFound":
                return None
            return _UNHANDLED

        self._call("delete", path, lambda: self._fs.rm_file(target), handle)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return iter([(name, size) for name, size in self._listing(prefix) if PART_MARK not in name])

    def foreign_objects(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Blobs named like parts of another driver's chain (the fsspec driver's on abfs://)
        that continue no segment: :meth:`list` hides them; nothing reads or removes them."""
        return iter([(name, size) for name, size in self._listing(prefix) if PART_MARK in name])

    def _listing(self, prefix: str) -> list[tuple[str, int]]:
        """Every blob below ``prefix`` (names relative to the root), sorted. Raises
        :class:`StateConflict` when a part-named blob continues a listed segment at its end:
        another driver's part chain (fsspec's abfs://), whose segments this driver would
        read too short, and so hand their offsets out again."""
        full = f"{self.root}/{prefix}" if self.root else prefix
        cut = len(self.root) + 1 if self.root else 0

        async def fetch():
            blobs = self._fs.service_client.get_container_client(self.container).list_blobs(name_starts_with=full)
            return sorted([(b.name[cut:], int(b.size)) async for b in blobs])

        listed = self._sdk("list prefix", prefix, fetch)
        sizes = dict(listed)
        for name, _size in listed:
            base, mark, rest = name.partition(PART_MARK)
            position = rest.rsplit("/", 1)[-1]
            if mark and position.isdigit() and sizes.get(base) == int(position):
                raise StateConflict(
                    f"azure: {name!r} in container {self.container!r} continues segment {base!r} as a part of "
                    "another driver's layout (the fsspec driver on abfs:// names parts this way): the azure driver "
                    "would read that segment too short. Open this tier with the driver that wrote it",
                    path=name, container=self.container)
        return listed

    def close(self) -> None:
        with contextlib.suppress(Exception):
            _run(self._fs, self._fs.service_client.close)
        close = getattr(getattr(self._fs, "credential", None), "close", None)  # an aio AAD credential
        if close is not None:
            with contextlib.suppress(Exception):
                if inspect.iscoroutinefunction(close):
                    _run(self._fs, close)
                else:
                    close()


def _run(fs, make: Callable[[], Any]) -> Any:
    """Run the coroutine ``make()`` returns on adlfs's event loop and wait for it."""
    from fsspec.asyn import sync

    async def call():
        return await make()

    return sync(fs.loop, call)


def _proxy_in_environment() -> bool:
    """Whether the environment names an HTTP proxy (``HTTP_PROXY``, ``HTTPS_PROXY``...): the
    only setting of aiohttp's ``trust_env`` an Azure client can use.

    Without one, the client's session is made with ``trust_env=False``. Otherwise aiohttp
    looks up ``~/.netrc`` on a worker thread before every request, to add a Basic
    ``Authorization`` that an Azure request, signed in its own header, could not carry: 0.55 ms
    of CPU per request against Azurite, a quarter of the client's share. A proxy set in the
    environment keeps the default, so the client goes through it as before."""
    import urllib.request

    return any(scheme in ("http", "https", "ws", "wss") for scheme in urllib.request.getproxies_environment())


def _account_from_url(url: str) -> str | None:
    """The account an endpoint URL names: ``https://NAME.blob...`` or ``http://host:port/NAME``."""
    rest = url.partition("://")[2].partition("?")[0]
    netloc, _, path = rest.partition("/")
    if path.strip("/"):
        return path.strip("/").split("/", 1)[0]
    host = netloc.rpartition("@")[2].partition(":")[0]
    return host.split(".", 1)[0] if "." in host and not host.replace(".", "").isdigit() else None


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
    "sas_token": ((str,), "a shared access signature (a string)"),
    "client_id": ((str,), "the service principal's application (client) id (a string)"),
    "client_secret": ((str,), "the service principal's client secret (a string)"),
    "tenant_id": ((str,), "the service principal's tenant id (a string)"),
    "anon": ((bool,), "true or false"),
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
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
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


def _check_auth(auth: dict[str, Any], account_name: str | None, endpoint: str | None) -> None:
    """One way to authenticate, that adlfs will really use, and an account to use it on."""
    given = [kind for kind in _AUTH_KINDS if any(auth[o] is not None for o in kind)]
    if len(given) > 1:
        names = " and ".join(f"{kind[0]!r}" if len(kind) == 1 else "/".join(kind) for kind in given)
        raise InvalidOption(f"driver 'azure' takes one way to authenticate, got {names}: keep one",
                            option=next(o for o in given[1] if auth[o] is not None))
    if given == [("credential", "account_key")] and auth["credential"] is not None and auth["account_key"] is not None:
        raise InvalidOption("driver 'azure' takes 'credential' or 'account_key', not both", option="account_key")
    if given and given[0] == _AUTH_KINDS[3]:
        missing = [o for o in _AUTH_KINDS[3] if auth[o] is None and not os.environ.get(_ENV[o])]
        if missing:
            raise InvalidOption(f"driver 'azure': a service principal needs client_id, client_secret and "
                                f"tenant_id; {', '.join(missing)} missing", option=missing[0])
    if given:  # a variable adlfs reads first must not replace the option given
        for kind in _AUTH_KINDS[:_AUTH_KINDS.index(given[0])]:
            for option in kind:
                if option in _ENV and os.environ.get(_ENV[option]):
                    raise InvalidOption(
                        f"driver 'azure': the environment variable {_ENV[option]} is set, and adlfs would use "
                        f"it instead of option {next(o for o in given[0] if auth[o] is not None)!r}: unset "
                        f"it, or configure option {option!r} instead", option=option)
    env_conn = "" if given else os.environ.get(_ENV["connection_string"], "")
    if env_conn and endpoint:
        raise InvalidOption(f"driver 'azure': the environment variable {_ENV['connection_string']} is set and gives "
                            f"the account URL, and so does option 'endpoint': keep one", option="endpoint")
    if env_conn and account_name and _conn_account(env_conn) not in (None, account_name):
        raise InvalidOption(f"driver 'azure': option 'account_name' is {account_name!r}, but adlfs would use the "
                            f"environment variable {_ENV['connection_string']}, which names account "
                            f"{_conn_account(env_conn)!r}: unset it, or fix 'account_name'", option="account_name")
    if not (auth["connection_string"] or os.environ.get(_ENV["connection_string"]) or endpoint or account_name
            or os.environ.get(_ENV["account_name"])):
        raise InvalidOption("driver 'azure' needs 'connection_string', 'endpoint' or 'account_name'",
                            option="account_name")
    if endpoint and auth["connection_string"]:
        raise InvalidOption("driver 'azure': 'endpoint' and 'connection_string' both give the account URL; "
                            "keep one", option="endpoint")


def _conn_account(connection_string: str) -> str | None:
    """The ``AccountName=`` of a connection string (never anything else of it)."""
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "accountname":
            return value.strip()
    return None


class _RequestHook:
    """Called by the SDK for each HTTP request it sends: passes it through the hook point."""

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
        raise RequestHookPoint.answer_lost()


def _cause(exc: BaseException) -> BaseException:
    """The SDK's exception behind adlfs's ``FileNotFoundError``/``FileExistsError``."""
    if isinstance(exc, (FileNotFoundError, FileExistsError)) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _status(exc: BaseException) -> tuple[int, str]:
    inner = _cause(exc)
    status = getattr(inner, "status_code", None) or 0
    code = getattr(inner, "error_code", None) or ""
    code = getattr(code, "value", code)  # StorageErrorCode is an enum
    if not code:
        response = getattr(inner, "response", None)
        headers = getattr(response, "headers", None) or {}
        code = headers.get("x-ms-error-code", "") if hasattr(headers, "get") else ""
    if not status and isinstance(inner, FileNotFoundError):
        status = 404  # adlfs found no blob (no answer of the service behind it)
    return int(status), str(code)


def _is_auth_error(exc: BaseException) -> bool:
    from azure.core.exceptions import ClientAuthenticationError

    try:
        from azure.identity import CredentialUnavailableError
    except ImportError:  # pragma: no cover - azure-identity is a dependency
        CredentialUnavailableError = ClientAuthenticationError
    return isinstance(_cause(exc), (ClientAuthenticationError, CredentialUnavailableError))


def _secret_texts(auth: dict[str, Any]) -> list[str]:
    """The secret texts of ``auth`` (a connection string's key and signature parts too),
    longest first."""
    found = set()
    for name, value in auth.items():
        if name in AzureDriver.secret_options and isinstance(value, str) and value:
            found.add(value)
    text = auth.get("connection_string")
    if isinstance(text, str):
        for part in text.split(";"):
            key, _, value = part.partition("=")
            if key.strip().lower() in ("accountkey", "sharedaccesssignature") and value.strip():
                found.add(value.strip())
    return sorted(found, key=len, reverse=True)


def _endpoint_shown(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: no path, query (a SAS) or user info."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "(unparsable account URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _host_port(url: str) -> str | None:
    """``host:port`` (the scheme's default port when none is given) of ``url``."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    return f"{parts.hostname}:{port}"


def _why_unreachable(exc: BaseException) -> tuple[str, str | None]:
    """``(cause, host:port)`` of a request that got no answer, as an operator reads it: the OS
    error behind it ("Connection refused", "Name or service not known") or the deepest
    message, and the host the connection was for when the HTTP library says (else None)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = (getattr(current, "inner_exception", None) or current.__cause__ or current.__context__)
    host = None
    for err in chain:  # aiohttp's ClientConnectorError knows the host and port it tried
        if isinstance(getattr(err, "host", None), str) and isinstance(getattr(err, "port", None), int):
            host = f"{err.host}:{err.port}"
            break
    for err in reversed(chain):
        if isinstance(err, OSError) and not isinstance(err, (FileNotFoundError, FileExistsError)):
            if isinstance(err.errno, int) and err.errno > 0:
                return os.strerror(err.errno), host
            if err.strerror:
                return str(err.strerror), host
    for err in reversed(chain):
        text = str(err).strip()
        if text:
            return text[:300], host
    return type(chain[-1]).__name__, host


def _transient(exc: BaseException, status: int) -> bool:
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError

    if status:
        return is_transient(status)
    return isinstance(_cause(exc), (ServiceRequestError, ServiceResponseError, ConnectionError, TimeoutError))
