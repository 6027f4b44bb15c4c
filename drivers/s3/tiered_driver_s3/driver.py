"""S3Driver: segments in an S3 bucket (or an S3-compatible store), on s3fs.

The layout is the object-store layout every object-store driver shares
(:mod:`tiered_core.spi.objectstore`): a base object ``K`` plus parts
``K#tiered-part/<segment id>/<position>``, each part created with ``If-None-Match: *`` (so
one part per position can ever exist), the size read from one listing. This module adds
only the S3 primitives and three S3-specific paths:

* **One PUT per group commit.** S3 listings carry no custom metadata (the segment id and
  the seal flag live in the base's metadata), so a view costs a LIST and a HEAD. A write
  at the end this instance last saw (its own previous write, or its last look) is sent as
  one exclusive PUT of the part, without a look first: if another writer got there, the
  part's name is taken (``If-None-Match: *`` refuses it) and the write falls back to the
  shared path, which reports the real size. Parts are never consolidated before the
  seal (:attr:`S3Driver.compact_at`), so every position a writer may have seen as the
  end stays taken while the segment is open.
* **One ranged GET per cold read of a sealed segment.** A sealed segment is one object
  (below). Once this instance has seen it sealed, a read is one ranged GET with
  ``If-Match`` on the ETag it saw; a changed or deleted object answers 412/404 and the
  read falls back to a fresh look.
* **Consolidation at seal, crash-safe.** S3 cannot compose objects, so :meth:`_consolidate`
  rebuilds the base with a multipart upload: pieces of at least 5 MiB are copied
  server-side (``UploadPartCopy`` with ``CopySourceIfMatch`` on the piece's ETag), smaller
  pieces are read and concatenated into parts of at least 5 MiB; under 5 MiB in all, it
  is one ``PutObject``. Either way the new base is completed (``CompleteMultipartUpload``
  or ``PutObject``) with ``If-Match`` on the base's ETag and the seal flag in its
  metadata. Why a crash cannot lose or double bytes: the base is replaced in one atomic
  step, by an object holding exactly the old base followed by the chain, so before that
  step the old base plus chain is read, after it the new base alone (the parts now lie
  inside it and the layout counts them as garbage, removed afterwards, or at the next
  seal or delete). An upload interrupted before completion leaves only an incomplete
  multipart upload, which no listing shows (it is aborted when the driver sees the
  failure; a bucket lifecycle rule ``AbortIncompleteMultipartUpload`` reclaims one a
  crash left). Before consolidating, the seal creates an empty *stop* part at the end
  (``If-None-Match: *``), so no writer can extend the chain while it is being copied:
  racing sealers copy the same bytes, which is why the outcome does not depend on the
  ``If-Match`` of the completion (moto 5.2.5 accepts a stale one; see
  :data:`EMULATOR_GAP`).

* **A view of an open segment lists only the parts it has not seen.** An open segment
  is its base plus one part per commit, all kept until the seal, so a full look (LIST of
  the whole chain, one page per 1,000 parts, then a HEAD of the base) costs O(parts) and
  a segment of ``n`` commits O(n^2) in all. So this instance keeps, per segment (bounded:
  :data:`CACHE_ENTRIES` segments, :data:`CACHED_PARTS` parts), the last open view it
  built -- the base (segment id, size, ETag, metadata) and its chain -- and a new view is
  a LIST of the parts of that segment id after the known end (``StartAfter`` the name of
  position ``end - 1``: positions are 20 digits, so names sort as positions do) followed
  by a HEAD of the base. If the base is gone or differs in anything (segment id, seal
  flag, size, ETag, metadata), the view is a full look instead. Why this cannot miss or
  double a byte:

  1. *An open base never changes while its segment id stays.* Every base is created
     exclusively with a fresh random id (first write, ``create``, ``write_if_absent``);
     an id is only ever added to a base that had none (adoption); the only other writes
     of a base are the seal (a metadata update, or a consolidation into a new base, both
     setting the seal flag, which nothing clears) and a compaction, which S3 never does
     before the seal (:attr:`S3Driver.compact_at`). ``delete`` removes the base first, and
     a recreated base has a new id. So a HEAD that finds the same id, unsealed, with the
     same size, ETag and metadata, proves the base was exactly that, open, for the whole
     time since the kept view was taken -- and the LIST happened in that time (before the
     HEAD).
  2. *While its base is open, no part of that segment id is deleted or replaced.* Parts
     are created exclusively (``If-None-Match: *``), so a name is never overwritten. They
     are deleted only by the seal's clean-up (after the base is sealed), by ``delete``
     (after the base is gone), and by a writer withdrawing its own part that a fresh view
     shows outside the chain -- which for an open base of the same id cannot happen: the
     writer created it at the end it had just seen, and the chain only grows, so its part
     is the chain's next piece. So every part of the kept chain still exists, and no new
     part can take a position inside it.
  3. *The parts not seen are the ones after the known end.* By 2, the chain up to the
     known end is unchanged; a new part before the end lies inside a counted piece (or the
     base) and a full look would not count it either (the layout chains only the part
     starting exactly at the end). A part at or after the end is listed (``StartAfter``
     is strict, S3 listings are strongly consistent), and it is chained by the layout's
     rule (same id, starting exactly at the end, not empty); one that is not chained is
     listed again next time, so a gap filled later is still found.

  So the view equals what a full look at the time of the LIST would compute (only
  ``garbage`` is partial: the seal and ``delete`` look in full). Another instance
  appending adds parts after the end (found); one sealing writes the stop part (empty:
  never chained) and then a sealed base (the HEAD differs: full look); one deleting
  removes the base first (HEAD: gone: full look); one recreating gives a new id (full
  look). A one-PUT write extends the kept chain by its own part: its exclusive create
  succeeded at the kept end, so while the base is open that part is the chain's next
  piece; if the base was sealed or replaced meanwhile, the next view's HEAD sees it.

Known limit of the one-PUT write: an instance whose view is stale because *another*
instance appended to the segment, sealed it and removed its parts, can still place a part
at a position the sealed object already covers; no reader counts it (it is garbage) but
that write reports success. A store never has two writers on one segment: tier-prefix
ownership fences the old owner before its writes reach the backend.
"""

from __future__ import annotations

import collections
import difflib
import errno
import json
import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from tiered_core.errors import DriverError, InvalidOption, NotFound
from tiered_core.spi import Capabilities, RetryPolicy
from tiered_core.spi.driver import REDACTED, redact_tree, scrubbed_texts, secret_values
from tiered_core.spi.objectstore import (
    META_ID, META_SEALED, PART_MARK, ChainedObjectDriver, ObjectInfo, Part, SegmentView, new_segment_id,
    own_part_names, part_key,
)
from tiered_core.spi.objectstore.layout import parse_part
from tiered_core.spi.transport import LOST_ANSWER, RequestHookPoint, is_transient

log = logging.getLogger("tiered_driver_s3")

#: Smallest part of a multipart upload (all but the last); S3's limit.
MIN_PART = 5 * 1024 * 1024
#: Largest part of a multipart upload (and largest single PutObject): S3's limit.
MAX_PART = 5 * 1024 * 1024 * 1024
#: Target size of a part built from small pieces (read, concatenated, uploaded).
BUILT_PART = 16 * 1024 * 1024
#: Small pieces a consolidation reads at once.
CONCURRENT_READS = 16
#: Views kept per instance for the one-PUT write, the one-GET sealed read and the
#: incremental view of an open segment.
CACHE_ENTRIES = 4096
#: Parts of open chains kept per instance (in all): a segment whose chain would pass it
#: is looked at in full (its view is not kept). About 0.5 KiB each.
CACHED_PARTS = 1 << 17
#: Options of s3fs the driver sets itself (a ``storage_options`` key may not override them).
RESERVED_STORAGE_OPTIONS = frozenset({
    "key", "secret", "token", "endpoint_url", "skip_instance_cache", "use_listings_cache", "asynchronous", "loop",
})
#: Error codes that mean the credentials were refused (nothing of the server's message is
#: quoted for them: it may echo the access key id).
_AUTH_CODES = frozenset({
    "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AccountProblem", "InvalidSecurity", "Forbidden",
})

#: moto's gap, declared by an ``emulated=True`` instance: none. moto 5.2.5 enforces every
#: precondition a guarantee of this driver rests on (``If-None-Match: *`` on PutObject,
#: ``If-Match`` on PutObject, GetObject and DeleteObject), atomically when run as
#: ``tiered_driver_s3.moto_atomic`` does (on its own threads it checks, then writes). It accepts
#: a stale ``If-Match`` on CompleteMultipartUpload and CopyObject, which the driver does not
#: rely on (the seal's stop part makes racing consolidations copy the same bytes; an adoption
#: is re-read).
EMULATOR_GAP: str | None = None


def emulator_capabilities() -> Capabilities:
    """The capabilities to claim against moto: the service's own (:data:`EMULATOR_GAP` is None)."""
    return S3Driver.capabilities


class _Conflict(Exception):
    """A precondition was refused (412, or ``FileExistsError`` for ``If-None-Match``)."""


@dataclass(frozen=True)
class _OpenChain:
    """The last view of an open segment this instance built: its base and its chain (a
    chain that existed while the base was exactly this; see the module docstring)."""

    segment_id: str
    version: str
    base_size: int
    metadata: Mapping[str, str]
    chain: tuple[Part, ...] = ()

    @property
    def end(self) -> int:
        return self.chain[-1].position + self.chain[-1].size if self.chain else self.base_size

    def extended(self, part: Part) -> "_OpenChain":
        return _OpenChain(self.segment_id, self.version, self.base_size, self.metadata, self.chain + (part,))


@dataclass
class _Seen:
    """What this instance last knew of a segment (see the module docstring)."""

    segment_id: str = ""
    size: int = 0
    sealed_version: str = ""  # ETag of a sealed, consolidated base ("" when not)
    open_chain: _OpenChain | None = None  # the last view of the open segment, when kept


class S3Driver(ChainedObjectDriver):
    """Segments as objects below ``prefix`` in one S3 bucket (AWS, MinIO, R2, Ceph RGW...).

    Guarantees the driver contract with S3's conditional writes (``If-None-Match: *`` and
    ``If-Match``, AWS since 2024): each ``write`` creates one part exclusively, so it
    lands whole or not at all (``atomic_write``) and of two writers at one position
    exactly one wins (``conditional_append``); ``write_if_absent`` is one exclusive
    create (``create_if_absent``); ``size`` is exact after a crash at any point; ``seal``
    leaves one object (later writes raise :class:`~tiered_core.errors.SegmentSealed`).
    A group commit costs one PUT, a cold read of a sealed segment one ranged GET (see the
    module docstring for how, and for the one limit of the fast write).

    Requests go through s3fs (aiobotocore): its credential chain (``key``/``secret``/
    ``token``, else the AWS environment, profile files, SSO, web identity, container and
    instance credentials), ``region``, ``endpoint_url`` for S3-compatible stores, and any
    other s3fs option in ``storage_options`` (e.g. ``{profile = "prod"}``,
    ``{requester_pays = true}``, ``{config_kwargs = {addressing_style = "path"}}``).
    Each request is sent once: transient failures (HTTP 408/429/5xx, SlowDown, resets,
    timeouts) raise ``DriverError(retryable=True)`` and the retry layer ``open_driver``
    adds repeats the operation when that is safe (``retries``); access denied and a
    missing bucket raise ``DriverError(retryable=False)`` naming the bucket. ``key``,
    ``secret`` and ``token`` are secrets: never in ``repr``, ``describe``, errors or logs.

    ``emulated=True`` (against moto; never inferred from the endpoint) declares the
    emulator's gap on that instance, :data:`EMULATOR_GAP` (none: moto enforces every
    precondition the guarantees rest on), and supplies fake credentials when none are
    given, so botocore never looks for real ones.
    """

    name = "s3"
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, atomic_write=True, create_if_absent=True,
                                max_write_size=MAX_PART)
    secret_options = frozenset({"key", "secret", "token"})
    location_options = ("bucket", "prefix")

    @classmethod
    def redact_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """:attr:`secret_options` and every credential nested in ``storage_options`` (any
        secret-named key, a URL's password) as ``***``; JSON text that cannot be read is
        hidden whole."""
        out = super().redact_options(options)
        value = out.get("storage_options")
        if isinstance(value, str):
            if not value.strip():
                return out
            try:
                value = json.loads(value)
            except ValueError:
                value = REDACTED
        if value is not None:
            out["storage_options"] = redact_tree(value) if isinstance(value, Mapping) else REDACTED
        if isinstance(out.get("endpoint_url"), str):  # refused at open, but listings show options unopened
            out["endpoint_url"] = redact_tree(out["endpoint_url"])
        return out

    can_consolidate = True
    #: One consolidation takes the whole chain (a multipart upload has 10,000 parts of up
    #: to 5 GiB; small pieces are concatenated).
    max_consolidate_sources = 1 << 30
    #: Never before the seal: an open segment keeps every part, so each position a writer
    #: may have seen as the end stays taken (what makes the one-PUT write safe), and S3
    #: would have to read and rewrite small parts to consolidate them.
    compact_at = 1 << 62

    def __init__(
        self, *, bucket: str, prefix: str = "", region: str | None = None, endpoint_url: str | None = None,
        key: str | None = None, secret: str | None = None, token: str | None = None,
        storage_options: Mapping[str, Any] | str | None = None, retries: int = 5, timeout: float = 60.0,
        emulated: bool = False,
    ) -> None:
        self.bucket = _check_bucket(bucket)
        self._set_root(prefix)
        for option, value in (("region", region), ("endpoint_url", endpoint_url)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidOption(f"option {option!r} of driver 's3' must be a non-empty string, got {value!r}",
                                    option=option)
        if endpoint_url is not None:
            _check_endpoint_url(endpoint_url)
        for option, value in (("key", key), ("secret", secret), ("token", token)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidOption(f"option {option!r} of driver 's3' must be a non-empty string "
                                    f"(value not shown: it is a secret)", option=option)
        if (key is None) != (secret is None):
            missing = "secret" if secret is None else "key"
            raise InvalidOption(f"driver 's3' needs both 'key' and 'secret' (or neither, for the AWS credential "
                                f"chain); {missing!r} is missing", option=missing)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidOption(f"option 'retries' of driver 's3' must be an int >= 0, got {retries!r}",
                                option="retries")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidOption(f"option 'timeout' of driver 's3' must be a number > 0, got {timeout!r}",
                                option="timeout")
        extra = _storage_options(storage_options)
        self.region = region
        self.endpoint_url = endpoint_url
        self.emulated = emulated
        self.retry_policy = RetryPolicy(retries=retries)
        # (and those nested in storage_options: an SSE-C key, a proxy URL's password)
        self._secrets = scrubbed_texts([*(v for v in (key, secret, token) if v), *secret_values(extra)])
        _LOG_REDACTOR.add(self._secrets)
        if emulated and key is None:
            key, secret = "tiered-emulator-key", "tiered-emulator-secret"
        self.transport = RequestHookPoint()
        self._seen: collections.OrderedDict[str, _Seen] = collections.OrderedDict()
        self._seen_lock = threading.Lock()
        self._seen_parts = 0  # parts of the open chains in _seen
        self.fs = self._make_fs(key, secret, token, timeout, extra)

    def _make_fs(self, key: str | None, secret: str | None, token: str | None, timeout: float,
                 extra: dict[str, Any]) -> Any:
        import s3fs

        _refuse_unknown_storage_options(extra)
        client_kwargs = dict(extra.pop("client_kwargs", None) or {})
        if self.region:
            client_kwargs.setdefault("region_name", self.region)
        config_kwargs = dict(extra.pop("config_kwargs", None) or {})
        # One attempt per request: the retry layer repeats whole operations when safe.
        config_kwargs.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        config_kwargs.setdefault("connect_timeout", timeout)
        config_kwargs.setdefault("read_timeout", timeout)
        # Every client of this process shares its TLS set-up (see _shared_tls_session_class).
        config_kwargs.setdefault("http_session_cls", _shared_tls_session_class())
        transport_retries = extra.pop("retries", 1)
        if "session" not in extra and not set(extra) - _S3FS_OPTIONS:
            extra["session"] = _shared_session()  # no session options: share the loaded service model
        try:
            fs = s3fs.S3FileSystem(
                key=key, secret=secret, token=token, endpoint_url=self.endpoint_url, client_kwargs=client_kwargs,
                config_kwargs=config_kwargs, skip_instance_cache=True, use_listings_cache=False, **extra,
            )
            fs.retries = transport_retries
            fs.connect()
            fs.s3.meta.events.register("before-send.s3", self._before_send)
        except Exception as exc:  # never echo the library's message: it may quote a credential
            error = _option_refused(exc, self.region) or DriverError(
                f"s3: cannot set up a client for bucket {self.bucket!r} ({type(exc).__name__}); check 'region', "
                "'endpoint_url' and 'storage_options'", retryable=False, bucket=self.bucket)
        else:
            return fs
        raise error  # outside the handler: the library's exception is not attached

    # -- requests ------------------------------------------------------------------------

    async def _before_send(self, request: Any, event_name: str = "", **_: Any) -> Any:
        """Passes every request through :attr:`transport` (where tests and benchmarks hook in)."""
        operation = event_name.rsplit(".", 1)[-1]
        what = f"{operation} {request.url.split('?', 1)[0].split('://', 1)[-1].split('/', 1)[-1]}"
        verdict = self.transport.before(request.method, what)
        if verdict is None:
            return None
        if verdict == LOST_ANSWER:
            await self.fs.s3._endpoint._send(request)
            raise RequestHookPoint.answer_lost()
        return _injected_response(request.url, int(verdict))

    def _call(self, operation: str, *, what: str, path: str | None = None, **kwargs: Any) -> Any:
        """``operation`` on the bucket; library errors become typed ones (:meth:`_error`)."""
        try:
            return self.fs.call_s3(operation, Bucket=self.bucket, **kwargs)
        except Exception as exc:
            raise self._error(exc, what, path) from None

    def _run(self, coro_fn: Any, *, what: str, path: str | None = None) -> Any:
        """A coroutine of this driver on s3fs's loop; errors as in :meth:`_call`."""
        from fsspec.asyn import sync

        try:
            return sync(self.fs.loop, coro_fn)
        except Exception as exc:
            raise self._error(exc, what, path) from None

    def _error(self, exc: BaseException, what: str, path: str | None) -> Exception:
        """The typed error for a failed request (``_Conflict`` for a refused precondition)."""
        cause = exc if getattr(exc, "response", None) is not None else exc.__cause__
        response = getattr(cause, "response", None) or {}
        code = str((response.get("Error") or {}).get("Code") or "")
        status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        ctx: dict[str, Any] = {"bucket": self.bucket, "path": path}
        if status:
            ctx["status"] = status
        if isinstance(exc, FileExistsError) or status == 412 or code in ("PreconditionFailed",
                                                                          "ConditionalRequestConflict"):
            return _Conflict(code or "PreconditionFailed")
        if code == "NoSuchBucket":
            path_part = urllib.parse.urlsplit(self.endpoint_url or "").path.rstrip("/")
            hint = (f"; option 'endpoint_url' has a path ({path_part!r}), which every request starts with: an S3 "
                    "endpoint is usually scheme://host[:port] alone") if path_part else ""
            return DriverError(f"s3: bucket {self.bucket!r} does not exist (while trying to {what}); create it "
                               f"or fix option 'bucket'{hint}", retryable=False, **ctx)
        if isinstance(exc, PermissionError) or code in _AUTH_CODES or status in (401, 403):
            return DriverError(f"s3: access denied ({code or status or 'PermissionError'}) to {what} in bucket "
                               f"{self.bucket!r}: check the credentials and the bucket policy", retryable=False,
                               **ctx)
        if code in ("NoSuchKey", "NoSuchUpload", "InvalidRange") or status in (404, 416) \
                or isinstance(exc, FileNotFoundError):
            return NotFound(path or what)
        if code in ("NoCredentialsError", "PartialCredentialsError") or type(exc).__name__.endswith("CredentialsError"):
            return DriverError(f"s3: no credentials to {what} in bucket {self.bucket!r}: set 'key' and 'secret', "
                               f"or configure the AWS credential chain", retryable=False, **ctx)
        message = self._redact(str(exc))
        retryable = (status == 0 or is_transient(status) or code in ("SlowDown", "RequestTimeout",
                                                                    "InternalError", "ServiceUnavailable"))
        if status == 0 and isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, OSError):
            retryable = False  # a bad parameter, not the network
        if isinstance(exc, OSError) and exc.errno == errno.EINVAL and not status:
            retryable = False
        kind = f"HTTP {status} {code}".strip() if status else type(exc).__name__
        return DriverError(f"s3: cannot {what} in bucket {self.bucket!r}: {kind}: {message}".rstrip(": "),
                           retryable=retryable, **ctx)

    def _redact(self, text: str) -> str:
        for value in self._secrets:
            text = text.replace(value, "***")
        return text

    # -- the primitives of the shared layout ------------------------------------------------

    def _list_objects(self, prefix: str, *, what: str, start_after: str = "") -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Prefix": prefix}
            if start_after:
                kwargs["StartAfter"] = start_after
            if token:
                kwargs["ContinuationToken"] = token
            resp = self._call("list_objects_v2", what=what, **kwargs)
            for item in resp.get("Contents") or ():
                out.append(ObjectInfo(item["Key"], int(item.get("Size", 0)), str(item.get("ETag", ""))))
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return out

    def _stat_object(self, name: str, *, what: str) -> ObjectInfo | None:
        try:
            resp = self._call("head_object", what=what, Key=name)
        except NotFound:
            return None
        return ObjectInfo(name, int(resp.get("ContentLength", 0)), str(resp.get("ETag", "")),
                          dict(resp.get("Metadata") or {}))

    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        kwargs: dict[str, Any] = {"Key": name, "Body": data, "IfNoneMatch": "*"}
        if metadata:
            kwargs["Metadata"] = dict(metadata)
        try:
            resp = self._call("put_object", what=what, **kwargs)
        except _Conflict:
            return None
        info = ObjectInfo(name, len(data), str(resp.get("ETag", "")), dict(metadata or {}))
        if metadata and metadata.get(META_ID) and PART_MARK not in name:  # a new base: its id is known
            # No part of a fresh id exists: the empty chain is this base's chain.
            opened = _OpenChain(metadata[META_ID], info.version, len(data), dict(metadata)) if info.version else None
            self._remember(name, _Seen(metadata[META_ID], len(data), open_chain=opened))
        return info

    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        try:
            return self._get(name, start, length, what=what)
        except _Conflict:  # only with If-Match, which this path does not send
            raise NotFound(name) from None

    def _get(self, name: str, start: int, length: int, *, what: str, if_match: str | None = None) -> bytes:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": name, "Range": f"bytes={start}-{start + length - 1}"}
        if if_match:
            kwargs["IfMatch"] = if_match

        async def get() -> bytes:
            resp = await self.fs._call_s3("get_object", **kwargs)
            body = resp["Body"]
            try:
                return await body.read()
            finally:
                body.close()

        return self._run(get, what=what, path=name)

    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        kwargs: dict[str, Any] = {"Key": name}
        if version:
            kwargs["IfMatch"] = version
        try:
            self._call("delete_object", what=what, **kwargs)
        except (_Conflict, NotFound):
            return False
        return True

    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        # A copy onto itself replaces the metadata; the bytes (and so the ETag) stay.
        try:
            resp = self._call("copy_object", what=what, Key=name, CopySource={"Bucket": self.bucket, "Key": name},
                              CopySourceIfMatch=version, IfMatch=version, MetadataDirective="REPLACE",
                              Metadata=dict(metadata))
        except (_Conflict, NotFound):
            return None
        etag = str((resp.get("CopyObjectResult") or {}).get("ETag", "")) or version
        stat = self._stat_object(name, what=what)
        return ObjectInfo(name, stat.size if stat else 0, etag, dict(metadata))

    def _consolidate(self, name: str, sources: Sequence[ObjectInfo], metadata: Mapping[str, str], *,
                     version: str, what: str) -> ObjectInfo | None:
        """Replace ``name`` by its bytes followed by ``sources``' (see the module docstring)."""
        head = self._stat_object(name, what=what)
        if head is None or head.version != version:
            return None
        pieces = ([head] if head.size else []) + [s for s in sources if s.size]
        total = sum(p.size for p in pieces)
        if total < MIN_PART:
            body = b"".join(self._pieces([(p, 0, p.size) for p in pieces], what))
            try:
                resp = self._call("put_object", what=what, Key=name, Body=body, IfMatch=version,
                                  Metadata=dict(metadata))
            except _Conflict:
                return None
            return ObjectInfo(name, total, str(resp.get("ETag", "")), dict(metadata))
        upload = self._call("create_multipart_upload", what=what, Key=name, Metadata=dict(metadata))["UploadId"]
        try:
            parts = self._upload_parts(name, upload, pieces, what)
            resp = self._call("complete_multipart_upload", what=what, Key=name, UploadId=upload, IfMatch=version,
                              MultipartUpload={"Parts": parts})
        except _Conflict:
            self._abort(name, upload, what)
            return None
        except BaseException:
            self._abort(name, upload, what)
            raise
        return ObjectInfo(name, total, str(resp.get("ETag", "")), dict(metadata))

    def _upload_parts(self, name: str, upload: str, pieces: list[ObjectInfo], what: str) -> list[dict[str, Any]]:
        """The parts of the new base: large pieces copied server-side, small ones read
        (concurrently) and concatenated into parts of at least 5 MiB."""
        parts: list[dict[str, Any]] = []
        pending: list[tuple[ObjectInfo, int, int]] = []
        buffered = 0

        def flush() -> None:
            nonlocal pending, buffered
            if buffered:
                body = b"".join(self._pieces(pending, what))
                resp = self._call("upload_part", what=what, Key=name, UploadId=upload, PartNumber=len(parts) + 1,
                                  Body=body)
                parts.append({"PartNumber": len(parts) + 1, "ETag": resp["ETag"]})
                pending, buffered = [], 0

        for piece in pieces:
            offset = 0
            while offset < piece.size:
                left = piece.size - offset
                if buffered == 0 and left >= MIN_PART:
                    n = min(left, MAX_PART)
                    if 0 < left - n < MIN_PART:  # never leave a tail too small to copy alone
                        n = left - MIN_PART
                    source = {"Bucket": self.bucket, "Key": piece.name}
                    try:
                        resp = self._call("upload_part_copy", what=what, Key=name, UploadId=upload,
                                          PartNumber=len(parts) + 1, CopySource=source,
                                          CopySourceRange=f"bytes={offset}-{offset + n - 1}",
                                          CopySourceIfMatch=piece.version)
                    except _Conflict:
                        raise NotFound(piece.name) from None  # replaced since the listing
                    parts.append({"PartNumber": len(parts) + 1, "ETag": resp["CopyPartResult"]["ETag"]})
                    offset += n
                    continue
                n = min(left, BUILT_PART - buffered)
                pending.append((piece, offset, n))
                buffered += n
                offset += n
                if buffered >= BUILT_PART:
                    flush()
        flush()
        return parts

    def _pieces(self, reads: Sequence[tuple[ObjectInfo, int, int]], what: str) -> list[bytes]:
        """``(object, start, length)`` ranges read concurrently, each ``If-Match`` its listed
        ETag; a piece replaced or gone since the listing raises ``NotFound``."""
        async def get(piece: ObjectInfo, start: int, length: int) -> bytes:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": piece.name,
                                      "Range": f"bytes={start}-{start + length - 1}"}
            if piece.version:
                kwargs["IfMatch"] = piece.version
            resp = await self.fs._call_s3("get_object", **kwargs)
            body = resp["Body"]
            try:
                return await body.read()
            finally:
                body.close()

        async def get_all() -> list[bytes]:
            import asyncio  # here: every process that loads the plugins imports this module

            limit = asyncio.Semaphore(CONCURRENT_READS)

            async def one(read: tuple[ObjectInfo, int, int]) -> bytes:
                async with limit:
                    return await get(*read)

            return list(await asyncio.gather(*(one(r) for r in reads)))

        try:
            out = self._run(get_all, what=what)
        except _Conflict:
            raise NotFound(what) from None
        for (piece, _start, length), data in zip(reads, out):
            if len(data) != length:
                raise NotFound(piece.name)
        return out

    def _remove(self, parts: Sequence[Any], path: str, why: str) -> None:
        """Delete parts the chain no longer counts, 1,000 a request (best effort: leftovers
        are garbage, removed at the next seal or delete)."""
        try:
            self._delete_many([p.name for p in parts], what=f"{why} {path!r}", path=path)
        except DriverError:
            log.info("s3: removing %d leftover part(s) of %r deferred", len(parts), path)

    def _delete_many(self, names: Sequence[str], *, what: str, path: str) -> None:
        for i in range(0, len(names), 1000):
            batch = names[i:i + 1000]
            resp = self._call("delete_objects", what=what, path=path,
                              Delete={"Objects": [{"Key": n} for n in batch], "Quiet": True})
            failed = [e for e in resp.get("Errors") or () if e.get("Code") != "NoSuchKey"]
            if failed:
                raise DriverError(f"s3: cannot {what} in bucket {self.bucket!r}: {len(failed)} object(s) not "
                                  f"deleted ({failed[0].get('Code')})", retryable=True, bucket=self.bucket,
                                  path=path)

    def _abort(self, name: str, upload: str, what: str) -> None:
        try:
            self._call("abort_multipart_upload", what=f"abort {what}", Key=name, UploadId=upload)
        except Exception:  # noqa: BLE001 - a leftover upload is invisible; a lifecycle rule reclaims it
            log.info("s3: could not abort an incomplete multipart upload of %r", name)

    # -- naming and messages ---------------------------------------------------------------

    def _where(self, path: str) -> str:
        return f"{path!r} in bucket {self.bucket!r}"

    def _error_context(self) -> dict[str, Any]:
        return {"bucket": self.bucket}

    # -- what this instance last saw ----------------------------------------------------------

    def _view(self, key: str, path: str) -> SegmentView:
        seen = self._last_seen(key)
        view = None
        if seen is not None and seen.open_chain is not None:
            view = self._view_after(key, path, seen.open_chain)
        if view is None:
            view = super()._view(key, path)
        if not view.exists:
            self._forget(key)
        elif view.sealed:
            version = view.version if not view.chain else ""
            self._remember(key, _Seen(view.segment_id, view.size, version))
        elif view.segment_id:
            kept = _OpenChain(view.segment_id, view.version, view.base_size, dict(view.metadata), tuple(view.chain))
            self._remember(key, _Seen(view.segment_id, view.size, open_chain=kept if view.version else None))
        else:
            self._forget(key)
        return view

    def _view_after(self, key: str, path: str, known: _OpenChain) -> SegmentView | None:
        """The view of an open segment from ``known`` plus the parts after its end: a LIST
        of those, then a HEAD of the base; None (look in full) when the base is gone or
        not exactly the known one. Why this is exact: the module docstring."""
        end = known.end
        after = part_key(key, known.segment_id, end - 1) if end > 0 else ""
        items = self._list_objects(f"{key}{PART_MARK}{known.segment_id}/", what=f"list {path!r}", start_after=after)
        base = self._stat_object(key, what=f"look up {path!r}")
        if (base is None or base.size != known.base_size or base.version != known.version
                or dict(base.metadata or {}) != dict(known.metadata) or known.metadata.get(META_SEALED) == "true"):
            return None
        chain, garbage = list(known.chain), []
        parts = [p for p in (parse_part(key, item) for item in items) if p is not None]
        for part in sorted(parts, key=lambda p: (p.position, p.name)):
            # The layout's chaining rule (layout.interpret) for an open base.
            if part.segment_id == known.segment_id and part.position == end and part.size > 0:
                chain.append(part)
                end += part.size
            else:
                garbage.append(part)
        return SegmentView(key, exists=True, base_size=base.size, version=base.version,
                           segment_id=known.segment_id, metadata=dict(base.metadata or {}),
                           base_checksum=base.checksum, chain=chain, garbage=garbage)

    def _remember(self, key: str, seen: _Seen) -> None:
        with self._seen_lock:
            old = self._seen.pop(key, None)
            if old is not None and old.open_chain is not None:
                self._seen_parts -= len(old.open_chain.chain)
            if seen.open_chain is not None and len(seen.open_chain.chain) > CACHED_PARTS:
                seen.open_chain = None  # too long to keep: this segment is looked at in full
            self._seen[key] = seen
            if seen.open_chain is not None:
                self._seen_parts += len(seen.open_chain.chain)
            while len(self._seen) > CACHE_ENTRIES or self._seen_parts > CACHED_PARTS:
                _key, dropped = self._seen.popitem(last=False)
                if dropped.open_chain is not None:
                    self._seen_parts -= len(dropped.open_chain.chain)

    def _forget(self, key: str) -> None:
        with self._seen_lock:
            old = self._seen.pop(key, None)
            if old is not None and old.open_chain is not None:
                self._seen_parts -= len(old.open_chain.chain)

    def _last_seen(self, key: str) -> _Seen | None:
        with self._seen_lock:
            return self._seen.get(key)

    # -- the operations with an S3 fast path -------------------------------------------------

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        key = self._key(path)
        payload = bytes(data)
        seen = self._last_seen(key)
        if position == 0 and payload and seen is None:
            # The first bytes of a segment: create the base without a look. If anything is
            # there already, S3 refuses the create and the shared path decides.
            segment_id = new_segment_id()
            if self._create_object(key, payload, {META_ID: segment_id}, what=f"write {path!r} at 0") is not None:
                return
            now = self._view(key, path)
            if now.segment_id == segment_id and now.size == len(payload):
                return  # this call's own create, resent by the transport after a lost answer
            seen = None
        if not payload or seen is None or seen.sealed_version or seen.size != position or not seen.segment_id:
            self._forget(key)
            super().write(path, position, payload)
            after = self._last_seen(key)
            if (after is not None and after.segment_id and not after.sealed_version
                    and after.size != position + len(payload)):
                self._remember(key, _Seen(after.segment_id, position + len(payload)))
            return
        name = part_key(key, seen.segment_id, position)
        try:
            created = self._create_object(name, payload, None, what=f"write {path!r} at {position}")
            if created is None:  # taken: another writer, or this write's own resent first attempt
                created = self._same_part(key, path, name, payload)
                if created is None:
                    raise self._refused(key, path, position)
        except BaseException:
            self._forget(key)
            raise
        known = seen.open_chain
        if known is not None and known.end == position:
            # The part at the kept end is the chain's next piece while the base stays open
            # (module docstring); the next view's HEAD checks that it does.
            known = known.extended(Part(name, seen.segment_id, position, len(payload), created.version))
        else:
            known = None
        self._remember(key, _Seen(seen.segment_id, position + len(payload), open_chain=known))

    def read(self, path: str, position: int, length: int) -> bytes:
        key = self._key(path)
        seen = self._last_seen(key)
        if seen is not None and seen.sealed_version and position + length <= seen.size:
            try:
                data = self._get(key, position, length, what=f"read {path!r} at {position}",
                                 if_match=seen.sealed_version)
                if len(data) == length:
                    return data
            except (_Conflict, NotFound):
                pass  # replaced or deleted since: look again
            self._forget(key)
        return super().read(path, position, length)

    def _read_pieces(self, path: str, position: int, reads: list[tuple[ObjectInfo, int, int]]) -> list[bytes]:
        # The pieces of an open segment (one part per commit) are read concurrently.
        return self._pieces(reads, f"read {path!r} at {position}")

    def seal(self, path: str) -> None:
        key = self._key(path)
        self._forget(key)
        view = self._view(key, path)
        if view.exists and not view.sealed and view.segment_id:
            # The stop: an empty part at the end, so the chain cannot grow while it is copied.
            stop = part_key(key, view.segment_id, view.size)
            self._create_object(stop, b"", None, what=f"seal {path!r}")
        self._forget(key)  # the seal looks in full: it removes every garbage part
        super().seal(path)
        self._forget(key)

    def delete(self, path: str) -> None:
        key = self._key(path)
        self._forget(key)
        view = self._view(key, path)  # whose parts are this segment's, up to where (layout.own_garbage)
        self._forget(key)
        # Base first: from then on the size is 0 and leftover parts are garbage.
        self._delete_object(key, what=f"delete {path!r}")
        names = own_part_names(key, self._list_objects(key + PART_MARK, what=f"list parts of {path!r}"),
                               view.segment_id, path, self.name, end=view.size)
        self._delete_many(names, what=f"delete parts of {path!r}", path=path)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return super().list(prefix)

    def close(self) -> None:
        fs, self.fs = self.fs, None
        if fs is None:
            return
        try:
            s3 = fs._s3
            if s3 is not None:
                from fsspec.asyn import sync

                sync(fs.loop, s3.close, timeout=10)
        except Exception:  # noqa: BLE001 - closing is best effort
            log.debug("s3: closing the client failed", exc_info=True)


#: s3fs constructor options that are not AWS session options (any other storage_options key
#: is, e.g. ``profile``: such a driver gets a session of its own).
_S3FS_OPTIONS = frozenset({
    "anon", "use_ssl", "client_kwargs", "requester_pays", "default_block_size", "default_fill_cache",
    "default_cache_type", "version_aware", "config_kwargs", "s3_additional_kwargs", "session", "username",
    "password", "cache_regions", "max_concurrency", "fixed_upload_size", "local_expiry_check",
    "listings_expiry_time", "max_paths",
})
_SESSION_LOCK = threading.Lock()
_SESSION: Any = None


def _shared_session() -> Any:
    """One botocore session per process: each client made from it reuses the loaded S3
    model (a client of a fresh session costs most of a second of CPU to make)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            import aiobotocore.session

            _SESSION = aiobotocore.session.AioSession()
        return _SESSION


_TLS_SESSION_CLASS: Any = None


def _shared_tls_session_class() -> Any:
    """aiobotocore's HTTP session with its TLS contexts made once per process.

    Each client's HTTP session otherwise builds its TLS context on its first request, loading
    the whole CA bundle again: about 25 ms of CPU of the 35 ms a new driver costs up to its
    first answer (measured against moto). The contexts are kept per set of inputs
    (verification setting or CA bundle path, client certificate, proxy and its settings) and
    never changed after they are built, which is how aiohttp itself shares its default one
    between connections."""
    global _TLS_SESSION_CLASS
    with _SESSION_LOCK:
        if _TLS_SESSION_CLASS is None:
            from aiobotocore.httpsession import AIOHTTPSession

            built: dict[Any, Any] = {}
            built_lock = threading.Lock()

            class SharedTlsSession(AIOHTTPSession):
                def _build_ssl_contexts(self, proxy_url: Any) -> Any:
                    settings = getattr(getattr(self, "_proxy_config", None), "settings", None) or {}
                    key = (repr(getattr(self, "_verify", None)), getattr(self, "_cert_file", None),
                           getattr(self, "_key_file", None), proxy_url,
                           repr(sorted((str(k), repr(v)) for k, v in settings.items())))
                    with built_lock:
                        if key not in built:
                            built[key] = super()._build_ssl_contexts(proxy_url)
                        return built[key]

            _TLS_SESSION_CLASS = SharedTlsSession
        return _TLS_SESSION_CLASS


class _LogRedactor(logging.Filter):
    """Keeps the s3 drivers' credentials out of the logs of the libraries under them.

    botocore logs each request at DEBUG with its headers (the access key id in the
    ``Authorization`` header, the session token in ``X-Amz-Security-Token``). This filter,
    on the loggers that do, replaces every credential a driver of this process was given
    by ``***`` before any handler sees the record.
    """

    LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.hooks", "botocore.parsers", "botocore.httpsession",
               "botocore.retryhandler", "botocore.credentials", "botocore.client", "botocore.utils",
               "aiobotocore.endpoint", "aiobotocore.client", "aiobotocore.httpsession", "aiobotocore.credentials",
               "s3fs", "fsspec")

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._installed = False
        self._lock = threading.Lock()

    def add(self, secrets: Sequence[str]) -> None:
        with self._lock:
            self._secrets.update(s for s in secrets if len(s) >= 4)
            if self._secrets and not self._installed:
                for name in self.LOGGERS:
                    logging.getLogger(name).addFilter(self)
                self._installed = True

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if not secrets:
            return True
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the library's business
            return True
        if any(s in text for s in secrets):
            for value in secrets:
                text = text.replace(value, "***")
            record.msg, record.args = text, ()
        return True


_LOG_REDACTOR = _LogRedactor()


def _check_bucket(bucket: Any) -> str:
    if not isinstance(bucket, str) or not 3 <= len(bucket) <= 63 or "/" in bucket or bucket != bucket.strip():
        raise InvalidOption(f"option 'bucket' of driver 's3' must be a bucket name (3 to 63 characters, no '/'), "
                            f"got {bucket!r}", option="bucket")
    return bucket


def _check_endpoint_url(url: str) -> None:
    """Refuse an ``endpoint_url`` that is not a URL, or that carries user info
    (``http://KEY:PASSWORD@host``): it is shown as the store's endpoint, and credentials
    belong in ``key``/``secret`` (redacted) instead."""
    if "://" not in url:
        raise InvalidOption(f"option 'endpoint_url' of driver 's3' must be a URL such as "
                            f"'https://s3.example.com', got {url!r}", option="endpoint_url")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise InvalidOption(f"option 'endpoint_url' of driver 's3' is not a valid URL "
                            f"({redact_tree(url)}): {exc}", option="endpoint_url") from None
    if parts.username is not None or parts.password is not None:
        # Neither the access key id nor the secret: the host and path only.
        shown = urllib.parse.urlunsplit((parts.scheme, f"{REDACTED}@{parts.netloc.rpartition('@')[2]}",
                                         parts.path, parts.query, parts.fragment))
        raise InvalidOption(f"option 'endpoint_url' of driver 's3' carries user info ({shown}): the endpoint is "
                            "shown wherever the store's options are, so give the credentials in options 'key' "
                            "and 'secret' (or the AWS credential chain) and leave them out of the URL, e.g. "
                            f"{_without_user_info(parts)!r}", option="endpoint_url")


def _without_user_info(parts: urllib.parse.SplitResult) -> str:
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _option_refused(exc: Exception, region: str | None) -> InvalidOption | None:
    """The option a client set-up failure names, as InvalidOption, or None. Only what the
    user wrote is quoted (a keyword's name, the region), never the library's message."""
    if isinstance(exc, TypeError):
        unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        if unknown is not None:
            return InvalidOption(f"option 'storage_options' of driver 's3': {unknown.group(1)!r} is not an option of "
                                 "the S3 client (a key of client_kwargs or config_kwargs?)", option="storage_options",
                                 key=unknown.group(1))
    if type(exc).__name__ == "InvalidRegionError":
        return InvalidOption(f"option 'region' of driver 's3' is not a region name: {region!r}", option="region",
                             value=region)
    return None


def _storage_options(value: Any) -> dict[str, Any]:
    """The ``storage_options`` table (a TOML table, a dict, or a JSON object string)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise InvalidOption("option 'storage_options' of driver 's3' must be a table (or a JSON object), "
                                "got text that is not JSON", option="storage_options") from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidOption(f"option 'storage_options' of driver 's3' must be a table of s3fs options, "
                            f"got {type(value).__name__}", option="storage_options")
    reserved = sorted(set(value) & RESERVED_STORAGE_OPTIONS)
    if reserved:
        raise InvalidOption(f"option 'storage_options' of driver 's3' may not set {', '.join(reserved)}: use the "
                            f"driver's own options (key, secret, token, endpoint_url) instead",
                            option="storage_options")
    for name in ("client_kwargs", "config_kwargs"):
        if name in value and not isinstance(value[name], Mapping):
            raise InvalidOption(f"option 'storage_options' of driver 's3': {name!r} must be a table",
                                option="storage_options")
    return dict(value)


def _refuse_unknown_storage_options(extra: Mapping[str, Any]) -> None:
    """InvalidOption naming a ``storage_options`` key that neither s3fs nor its botocore
    session takes (a typo such as ``profle`` otherwise fails inside the session as a bare
    TypeError, which the client set-up cannot name without echoing the library)."""
    import inspect

    import aiobotocore.session
    import s3fs

    known = {"use_listings_cache", "listings_expiry_time", "max_paths"}  # s3fs hands these to fsspec
    for init in (s3fs.S3FileSystem.__init__, aiobotocore.session.AioSession.__init__):
        known.update(name for name, p in inspect.signature(init).parameters.items()
                     if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    unknown = sorted(set(extra) - known)
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, sorted(known - RESERVED_STORAGE_OPTIONS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidOption(f"option 'storage_options' of driver 's3': {name!r} is not an option of s3fs or of "
                            f"its botocore session{hint}", option="storage_options", key=name)
    s3_config = (extra.get("config_kwargs") or {}).get("s3") if isinstance(extra.get("config_kwargs"), Mapping) else None
    if isinstance(s3_config, Mapping):
        # botocore keeps any key of its s3 configuration and reads the ones it knows: a
        # misspelt one is dropped silently (path-style addressing, an endpoint choice...)
        for name in sorted(set(s3_config) - _BOTOCORE_S3_CONFIG):
            close = difflib.get_close_matches(name, sorted(_BOTOCORE_S3_CONFIG), n=1, cutoff=0.85)
            if close:
                raise InvalidOption(f"option 'storage_options' of driver 's3': config_kwargs.s3 key {name!r} is not "
                                    f"one botocore reads (did you mean {close[0]!r}?)", option="storage_options",
                                    key=f"config_kwargs.s3.{name}")


#: The keys of botocore's ``Config(s3={...})`` (botocore/config.py and its client args).
_BOTOCORE_S3_CONFIG = frozenset({"use_accelerate_endpoint", "payload_signing_enabled", "addressing_style",
                                 "us_east_1_regional_endpoint", "s3_disable_express_session_auth",
                                 "use_arn_region", "use_dualstack_endpoint"})


class _InjectedBody:
    """The body of a response an installed request hook made up (an S3 error document)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self, *_: Any) -> bytes:
        return self._body


def _injected_response(url: str, status: int) -> Any:
    from aiobotocore.awsrequest import AioAWSResponse

    code = {503: "SlowDown", 500: "InternalError", 403: "AccessDenied", 404: "NoSuchKey",
            412: "PreconditionFailed"}.get(status, "InjectedError")
    body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>injected by a request hook</Message></Error>").encode()
    return AioAWSResponse(url, status, {"content-type": "application/xml"}, _InjectedBody(body))


__all__ = ["EMULATOR_GAP", "S3Driver", "emulator_capabilities"]
