"""GcsDriver: segments in a Google Cloud Storage bucket, on gcsfs (the shared object-store
layout, :mod:`tiered_core.spi.objectstore`, over GCS primitives)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Mapping, Sequence

from tiered_core.errors import DriverError, InvalidOption, NotFound
from tiered_core.spi import Capabilities, RetryPolicy
from tiered_core.spi.objectstore import ChainedObjectDriver, ObjectInfo
from tiered_core.spi.transport import RequestHookPoint

from .transport import GcsTransport

#: What a listing asks for: enough for the layout, nothing more.
LIST_FIELDS = "items(name,size,generation,metadata,md5Hash),nextPageToken"


class GcsDriver(ChainedObjectDriver):
    """Segments as objects in one GCS bucket, below ``prefix``, through gcsfs.

    The layout and its guarantees are :class:`~tiered_core.spi.objectstore.ChainedObjectDriver`'s:
    each ``write`` is one exclusive part upload (``ifGenerationMatch=0``), so it lands
    whole or not at all (``atomic_write``), and ``size`` is recomputed from one listing,
    exact after a crash at any point; racing writers are excluded where the service
    enforces generation preconditions. Parts are composed into the base (GCS compose, 32
    sources a call) when the chain gets long and at seal, which records the seal in the
    base's metadata; later writes raise :class:`~tiered_core.errors.SegmentSealed`.

    Every call is gcsfs's (``gcsfs.core.GCSFileSystem``, see :mod:`.transport`): the
    exclusive create is ``pipe_file(mode="create")`` (one multipart upload at any size),
    the ranged read ``cat_file``, the listing, the delete, the metadata update and the
    compose are ``call`` requests of the JSON API, because gcsfs's own ``ls``/``find``,
    ``rm`` and ``merge`` take no generation precondition (and ``find`` lists twice when
    nothing matches). No call needs the official SDK. One thing is not gcsfs's public API:
    the request hook -- the driver's probe wraps the undecorated ``GCSFileSystem._request``
    (its ``__wrapped__``) and decorates it again with gcsfs's ``retry_request`` using the
    ``retries`` option, since gcsfs fixes the retry count in that decorator.

    Failures: gcsfs retries each request (HTTP 408/429/5xx, connection errors, token
    refreshes; backoff 1 s, 2 s, 4 s ... 32 s) ``retries`` times, except a compose, which
    is sent once (after a lost answer the driver looks at the base). What still fails
    raises ``DriverError(retryable=True)`` and the retry layer ``open_driver`` adds
    repeats the whole operation when that is safe (``retries`` sets its count too, within
    its time budget); 401/403 and a missing bucket raise ``DriverError(retryable=False)``
    naming the bucket. ``token`` is a secret: it never appears in ``repr``, ``describe``
    or error messages.

    Against an emulator say so with ``emulated=True`` (never inferred from the endpoint):
    that instance then declares fake-gcs-server's gap, :data:`EMULATOR_GAP`
    (``conditional_append`` and ``create_if_absent`` False, because the emulator does not
    enforce generation preconditions), and defaults ``token`` to ``"anon"``. The class's
    ``capabilities`` (the real service's) never change.

    Authentication (gcsfs's): ``token`` is a service-account (or authorized-user) JSON
    path, its parsed dict, ``"google_default"``, ``"cloud"`` (the metadata server),
    ``"anon"`` or a google-auth credentials object; when absent, the standard chain
    (application-default credentials, the metadata server on Google Cloud), else
    anonymous access. ``project`` is passed to gcsfs (bucket-scoped object calls need none).
    """

    name = "gcs"
    #: Only what differs from the defaults of :class:`Capabilities`.
    capabilities = Capabilities(conditional_append=True, atomic_write=True, create_if_absent=True)
    secret_options = frozenset({"token"})
    location_options = ("bucket", "prefix")
    can_consolidate = True
    #: A compose call takes at most 32 sources: the base and 31 parts.
    max_consolidate_sources = 32

    def __init__(
        self, *, bucket: str, prefix: str = "", project: str | None = None, token: Any = None,
        endpoint: str | None = None, emulated: bool = False, retries: int = 5, timeout: float = 60.0,
    ) -> None:
        if not bucket or "/" in bucket:
            raise InvalidOption(f"option 'bucket' of driver 'gcs' must be a bucket name, got {bucket!r}",
                                option="bucket")
        if retries < 0 or timeout <= 0:
            raise InvalidOption("options 'retries' (>= 0) and 'timeout' (> 0) of driver 'gcs' are out of range",
                                option="retries" if retries < 0 else "timeout")
        if endpoint and (not isinstance(endpoint, str) or "://" not in endpoint
                                     or not endpoint.split("://", 1)[1].strip("/")):
            raise InvalidOption(f"option 'endpoint' of driver 'gcs' must be a URL such as 'http://127.0.0.1:4443', "
                                f"got {endpoint!r}", option="endpoint", value=endpoint)
        self.bucket = bucket
        self.project = project
        self.retry_policy = RetryPolicy(retries=retries)
        self._set_root(prefix)
        self.emulated = emulated
        if emulated:  # this instance's capabilities only: the class keeps the service's
            self.capabilities = emulator_capabilities()
            if token is None:
                token = "anon"
        try:
            self.gcs = GcsTransport(bucket=bucket, token=token, endpoint=endpoint.rstrip("/") if endpoint else None,
                                    project=project, timeout=timeout, retries=retries)
        except InvalidOption:
            raise
        except KeyError as exc:
            if not isinstance(token, Mapping):
                raise
            # gcsfs reads a table that is no complete service-account key as an authorized-user
            # token, by key: the missing key is a field name, no secret
            raise InvalidOption(f"option 'token' of driver 'gcs' (bucket {bucket!r}): the credentials table is "
                                "neither a complete service-account key (type, project_id, private_key_id, "
                                "private_key, client_email, client_id, token_uri) nor an authorized-user token (it "
                                f"lacks the field {str(exc.args[0])!r})", option="token",
                                field=str(exc.args[0])) from None
        except Exception as exc:  # credential chain failures; never echo the token
            # The library's message may quote the token, so only its type is kept.
            raise DriverError(f"gcs: cannot set up credentials for bucket {bucket!r} ({type(exc).__name__}); "
                              f"'token' takes a service-account JSON path or dict, 'google_default', 'cloud', "
                              f"'anon', or a credentials object", retryable=False, bucket=bucket) from None

    @property
    def transport(self) -> RequestHookPoint:
        """The request hook point every HTTP attempt passes (where tests and benchmarks install
        ``tiered_conformance.request_probe.RequestProbe``)."""
        return self.gcs.hooks

    def _where(self, path: str) -> str:
        return f"{path!r} in bucket {self.bucket!r}"

    def _error_context(self) -> dict[str, Any]:
        return {"bucket": self.bucket}

    def _no_bucket(self, what: str) -> DriverError:
        return DriverError(f"gcs: bucket {self.bucket!r} does not exist (while trying to {what})",
                           retryable=False, bucket=self.bucket, status=404)

    def _path(self, name: str) -> str:
        return f"{self.bucket}/{name}"

    @staticmethod
    def _info(item: Mapping[str, Any], name: str | None = None) -> ObjectInfo:
        return ObjectInfo(name or str(item.get("name", "")), int(item.get("size", 0)),
                          str(item.get("generation", "")), dict(item.get("metadata") or {}),
                          str(item.get("md5Hash", "")))

    # -- the primitives of the shared layout ----------------------------------------------

    def _list_objects(self, prefix: str, *, what: str) -> list[ObjectInfo]:
        async def pages(fs: Any) -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = []
            token = None
            while True:
                page = await fs._call("GET", "b/{}/o", self.bucket, json_out=True, prefix=prefix,
                                      maxResults=1000, fields=LIST_FIELDS, pageToken=token)
                items.extend(page.get("items", []))
                token = page.get("nextPageToken")
                if not token:
                    return items

        try:
            return [self._info(item) for item in self.gcs.run(what, pages)]
        except FileNotFoundError:
            raise self._no_bucket(what) from None

    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        # chunksize above the size: always one multipart upload, whose precondition the
        # emulator enforces too (it ignores it on resumable uploads).
        async def put(fs: Any) -> Any:
            return await fs._pipe_file(self._path(name), data, metadata=dict(metadata) if metadata else None,
                                       mode="create", chunksize=len(data) + 1)

        try:
            resource = self.gcs.run(what, put)
        except FileExistsError:
            return None
        except FileNotFoundError:
            raise self._no_bucket(what) from None
        return self._info(resource if isinstance(resource, dict) else {}, name)

    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        async def get(fs: Any) -> bytes:
            return await fs._cat_file(self._path(name), start=start, end=start + length)

        try:
            body = self.gcs.run(what, get)
        except FileNotFoundError:
            raise NotFound(name) from None
        except DriverError as exc:
            if exc.context.get("status") == 416:  # starts past its end: replaced meanwhile
                raise NotFound(name, "is shorter than the range read") from None
            raise
        if len(body) > length:  # a server that ignored the range sent the whole object
            body = body[start:start + length]
        return body

    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        async def rm(fs: Any) -> None:
            await fs._call("DELETE", "b/{}/o/{}", self.bucket, name, ifGenerationMatch=version or None)

        try:
            self.gcs.run(what, rm)
        except (FileNotFoundError, FileExistsError):
            return False
        return True

    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        async def patch(fs: Any) -> Any:
            return await fs._call("PATCH", "b/{}/o/{}", self.bucket, name, json={"metadata": dict(metadata)},
                                  ifGenerationMatch=version, json_out=True)

        try:
            return self._info(self.gcs.run(what, patch), name)
        except (FileNotFoundError, FileExistsError):
            return None

    def _consolidate(self, name: str, sources: Sequence[ObjectInfo], metadata: Mapping[str, str], *,
                     version: str, what: str) -> ObjectInfo | None:
        body = {
            "sourceObjects": [{"name": name}] + [{"name": s.name} for s in sources],
            "destination": {"contentType": "application/octet-stream", "metadata": dict(metadata)},
        }

        async def compose(fs: Any) -> Any:
            return await fs._call("POST", "b/{}/o/{}/compose", self.bucket, name, json=body,
                                  ifGenerationMatch=version, json_out=True)

        try:
            return self._info(self.gcs.run(what, compose, once=True), name)
        except FileExistsError:
            return None
        except FileNotFoundError:
            raise NotFound(name, "or one of its parts does not exist") from None

    def _content_checksum(self, data: bytes) -> str | None:
        return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()

    def close(self) -> None:
        self.gcs.close()


#: Declared gap of the emulator: it accepts ``ifGenerationMatch`` on compose and metadata
#: updates without enforcing it, so racing writers are not excluded by the backend.
EMULATOR_GAP = "fake-gcs-server does not enforce ifGenerationMatch"


def emulator_capabilities() -> Capabilities:
    """The capabilities to claim when running against fake-gcs-server."""
    return GcsDriver.capabilities.override(EMULATOR_GAP, conditional_append=False, create_if_absent=False)
