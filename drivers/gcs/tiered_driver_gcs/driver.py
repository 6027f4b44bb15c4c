"""GcsDriver: segments in a Google Cloud Storage bucket (the shared object-store layout,
:mod:`tiered_core.spi.objectstore`, over GCS primitives)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Mapping, Sequence

from tiered_core.errors import DriverError, InvalidOption, NotFound
from tiered_core.spi import Capabilities, RetryPolicy
from tiered_core.spi.objectstore import ChainedObjectDriver, ObjectInfo

from .client import GcsClient, Response


class GcsDriver(ChainedObjectDriver):
    """Segments as objects in one GCS bucket, below ``prefix``.

    The layout and its guarantees are :class:`~tiered_core.spi.objectstore.ChainedObjectDriver`'s:
    each ``write`` is one conditional part upload (``ifGenerationMatch=0``), so it lands
    whole or not at all (``atomic_write``), and ``size`` is recomputed from one listing,
    exact after a crash at any point; racing writers are excluded where the service
    enforces generation preconditions. Parts are composed into the base (GCS compose, 32
    sources a call) when the chain gets long and at seal, which records the seal in the
    base's metadata; later writes raise :class:`~tiered_core.errors.SegmentSealed`.

    Each request is sent once: transient failures (HTTP 408/429/5xx, resets, timeouts)
    raise ``DriverError(retryable=True)``, and the retry layer ``open_driver`` adds
    repeats the operation when that is safe (``retries`` sets its count); 401/403 and a
    missing bucket raise ``DriverError(retryable=False)`` naming the bucket. ``token`` is
    a secret: it never appears in ``repr``, ``describe`` or error messages.

    Against an emulator say so with ``emulated=True`` (never inferred from the endpoint):
    that instance then declares fake-gcs-server's gap, :data:`EMULATOR_GAP`
    (``conditional_append`` and ``create_if_absent`` False, because the emulator does not
    enforce generation preconditions), and defaults ``token`` to ``"anon"``. The class's
    ``capabilities`` (the real service's) never change.

    Authentication: ``token`` is a service-account (or authorized-user) JSON path, its
    parsed dict, ``"google_default"``, ``"cloud"``, ``"anon"`` or a google-auth
    credentials object; when absent, the standard Google credential chain, or anonymous
    access when an emulator endpoint is configured. ``project`` is accepted for
    configurations written for gcsfs; bucket-scoped object calls need none.
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
            self.client = GcsClient(bucket=bucket, token=token, endpoint=endpoint, timeout=timeout)
        except Exception as exc:  # credential chain failures; never echo the token
            # The library's message may quote the token, so only its type is kept.
            raise DriverError(f"gcs: cannot set up credentials for bucket {bucket!r} ({type(exc).__name__}); "
                              f"'token' takes a service-account JSON path or dict, 'google_default', 'cloud', "
                              f"'anon', or a credentials object", retryable=False, bucket=bucket) from None

    @property
    def transport(self):
        """The request probe: requests sent (benchmarks), and a test hook on each."""
        return self.client.transport

    def _where(self, path: str) -> str:
        return f"{path!r} in bucket {self.bucket!r}"

    def _error_context(self) -> dict[str, Any]:
        return {"bucket": self.bucket}

    def _fail(self, resp: Response, what: str) -> DriverError:
        """A typed error for an unexpected status (the client raised transient ones already)."""
        msg = resp.error_message()
        if resp.status in (401, 403):
            text = f"gcs: access denied ({resp.status}) to {what} in bucket {self.bucket!r}: check the credentials " \
                   f"and IAM permissions"
            return DriverError(text, retryable=False, bucket=self.bucket, status=resp.status)
        if resp.status == 404:
            return DriverError(f"gcs: bucket {self.bucket!r} does not exist (while trying to {what})",
                               retryable=False, bucket=self.bucket, status=404)
        return DriverError(f"gcs: cannot {what} in bucket {self.bucket!r}: HTTP {resp.status} {msg}".rstrip(),
                           retryable=resp.status >= 500, bucket=self.bucket, status=resp.status)

    @staticmethod
    def _info(item: Mapping[str, Any]) -> ObjectInfo:
        return ObjectInfo(str(item.get("name", "")), int(item.get("size", 0)), str(item.get("generation", "")),
                          dict(item.get("metadata") or {}), str(item.get("md5Hash", "")))

    # -- the primitives of the shared layout ----------------------------------------------

    def _list_objects(self, prefix: str, *, what: str) -> list[ObjectInfo]:
        status, items, _msg = self.client.list(prefix, what=what)
        if status != 200:
            raise self._fail(Response(status, b""), what)
        return [self._info(item) for item in items]

    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        resp = self.client.upload(name, data, metadata, what=what, if_generation_match=0)
        if resp.status == 412:
            return None
        if resp.status != 200:
            raise self._fail(resp, what)
        return self._info(resp.json())

    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        resp = self.client.download(name, start, length, what=what)
        if resp.status in (404, 416):
            raise NotFound(name)
        if resp.status not in (200, 206):
            raise self._fail(resp, what)
        body = resp.body
        if resp.status == 200 and len(body) != length:  # server ignored the range
            body = body[start:start + length]
        return body

    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        resp = self.client.delete(name, what=what, if_generation_match=int(version) if version else None)
        if resp.status in (404, 412):
            return False
        if resp.status not in (200, 204):
            raise self._fail(resp, what)
        return True

    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        resp = self.client.patch_metadata(name, metadata, what=what, if_generation_match=int(version))
        if resp.status in (404, 412):
            return None
        if resp.status != 200:
            raise self._fail(resp, what)
        return self._info(resp.json())

    def _consolidate(self, name: str, sources: Sequence[ObjectInfo], metadata: Mapping[str, str], *,
                     version: str, what: str) -> ObjectInfo | None:
        resp = self.client.compose(name, [name] + [s.name for s in sources], metadata, what=what,
                                   if_generation_match=int(version))
        if resp.status == 412:
            return None
        if resp.status == 404:
            raise NotFound(name, "or one of its parts does not exist")
        if resp.status != 200:
            raise self._fail(resp, what)
        return self._info(resp.json())

    def _content_checksum(self, data: bytes) -> str | None:
        return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()

    def close(self) -> None:
        self.client.close()


#: Declared gap of the emulator: it accepts ``ifGenerationMatch`` on compose and metadata
#: updates without enforcing it, so racing writers are not excluded by the backend.
EMULATOR_GAP = "fake-gcs-server does not enforce ifGenerationMatch"


def emulator_capabilities() -> Capabilities:
    """The capabilities to claim when running against fake-gcs-server."""
    return GcsDriver.capabilities.override(EMULATOR_GAP, conditional_append=False, create_if_absent=False)
