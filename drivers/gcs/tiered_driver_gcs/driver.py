"""GcsDriver: segments in a Google Cloud Storage bucket (layout in :mod:`.layout`)."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from typing import Any, Iterator

from tiered_core.errors import (
    DriverError, IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed,
)
from tiered_core.spi import Capabilities, RetryPolicy, SegmentDriver

from .client import GcsClient, Response
from .layout import (
    MAX_COMPOSE_SOURCES, META_ID, META_SEALED, PART_MARK, SegmentView, group_listing, interpret, part_key,
)

log = logging.getLogger("tiered_driver_gcs")

#: Parts one compose call folds into the base (the base is the 32nd source).
COMPOSE_BATCH = MAX_COMPOSE_SOURCES - 1
#: Compose the chain into the base once it has this many parts: keeps listings and
#: ranged reads short, while a run of large commits (the usual 4 MiB batches) is
#: not slowed by composes it does not need.
COMPACT_AT = 64


class GcsDriver(SegmentDriver):
    """Segments as objects in one GCS bucket, below ``prefix``.

    Guarantees the driver contract on immutable objects: each ``write`` is one
    conditional part upload (``ifGenerationMatch=0``), so it lands whole or not at all
    (``atomic_write``), and ``size`` is recomputed from one listing, exact after a crash
    at any point. The position is checked before the upload and, where the backend
    enforces preconditions (not the emulator), confirmed after it: the part must
    continue the chain, so two racing writers cannot both succeed.
    ``seal`` composes everything into the one base object and records the seal in its
    metadata; later writes raise :class:`~tiered_core.errors.SegmentSealed`.

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
        self.root = prefix.strip("/")
        if PART_MARK.rstrip("/") in self.root:
            raise InvalidOption(f"prefix {prefix!r} contains the reserved {PART_MARK!r}", option="prefix")
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

    # -- helpers ---------------------------------------------------------------------

    @property
    def transport(self):
        """The request probe: requests sent (benchmarks), and a test hook on each."""
        return self.client.transport

    def _key(self, path: str) -> str:
        if PART_MARK.rstrip("/") in path:
            raise InvalidPath(f"path {path!r} contains the reserved {PART_MARK.rstrip('/')!r}", path=path)
        return f"{self.root}/{path}" if self.root else path

    def _rel(self, key: str) -> str:
        return key[len(self.root) + 1:] if self.root else key

    def _fail(self, resp: Response, action: str, path: str | None = None, **ctx: Any) -> DriverError:
        """A typed error for an unexpected status (the client raised transient ones already)."""
        target = f"{path!r} in bucket {self.bucket!r}" if path else f"bucket {self.bucket!r}"
        msg = resp.error_message()
        if resp.status in (401, 403):
            text = f"gcs: access denied ({resp.status}) to {action} {target}: check the credentials and IAM permissions"
            return DriverError(text, retryable=False, bucket=self.bucket, path=path, status=resp.status, **ctx)
        if resp.status == 404:
            return DriverError(f"gcs: bucket {self.bucket!r} does not exist (while trying to {action} {path!r})",
                               retryable=False, bucket=self.bucket, path=path, status=404, **ctx)
        return DriverError(f"gcs: cannot {action} {target}: HTTP {resp.status} {msg}".rstrip(),
                           retryable=resp.status >= 500, bucket=self.bucket, path=path, status=resp.status, **ctx)

    def _view(self, key: str, path: str) -> SegmentView:
        status, items, _msg = self.client.list(key, what=f"list {path!r}")
        if status != 200:
            raise self._fail(Response(status, b""), "look up", path)
        return interpret(key, items)

    # -- the operations ---------------------------------------------------------------

    def size(self, path: str) -> int:
        return self._view(self._key(path), path).size

    def exists(self, path: str) -> bool:
        return self._view(self._key(path), path).exists

    def is_sealed(self, path: str) -> bool:
        return self._view(self._key(path), path).sealed

    def create(self, path: str) -> None:
        key = self._key(path)
        if self._view(key, path).exists:
            return
        resp = self.client.upload(key, b"", {META_ID: uuid.uuid4().hex}, what=f"create {path!r}",
                                  if_generation_match=0)
        if resp.status not in (200, 412):  # 412: someone created it meanwhile -- fine
            raise self._fail(resp, "create", path)

    def write_if_absent(self, path: str, data: bytes) -> bool:
        """One upload with ``ifGenerationMatch=0``: GCS refuses it (412) when the object
        exists. (After a lost answer, the retry layer recognises this call's own object.)"""
        key = self._key(path)
        if self._view(key, path).exists:
            return False  # the only guard where the backend ignores the precondition
        resp = self.client.upload(key, bytes(data), {META_ID: uuid.uuid4().hex}, what=f"create {path!r}",
                                  if_generation_match=0)
        if resp.status == 200:
            return True
        if resp.status == 412:
            return False
        raise self._fail(resp, "create", path)

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        key = self._key(path)
        payload = bytes(data)
        view = self._view(key, path)
        if view.sealed:
            raise SegmentSealed(path)
        if view.size != position:
            raise PositionMismatch(path, position, view.size)
        if not payload:
            if not view.exists:
                self.create(path)
            return
        if not view.exists or (view.base_size == 0 and not view.chain):
            self._write_base(key, path, position, payload, view)
            return
        if not view.segment_id:  # an object this driver did not create: adopt it
            meta = {**view.metadata, META_ID: uuid.uuid4().hex}
            resp = self.client.patch_metadata(key, meta, what=f"adopt {path!r}", if_generation_match=view.generation)
            if resp.status != 200:
                raise self._fail(resp, "adopt", path)
            view = self._view(key, path)
            if view.size != position or view.sealed or not view.segment_id:
                raise DriverError(f"gcs: {path!r} in bucket {self.bucket!r} changed while being adopted",
                                  retryable=True, bucket=self.bucket, path=path)
        self._write_part(key, path, position, payload, view)

    def _write_base(self, key: str, path: str, position: int, payload: bytes, view: SegmentView) -> None:
        """First bytes of a segment: the base object itself is (re)written, conditionally."""
        meta = {META_ID: view.segment_id or uuid.uuid4().hex}
        resp = self.client.upload(key, payload, meta, what=f"write {path!r} at {position}",
                                  if_generation_match=view.generation if view.exists else 0)
        if resp.status == 200:
            return
        if resp.status == 412:
            now = self._view(key, path)
            if now.sealed:
                raise SegmentSealed(path)
            raise PositionMismatch(path, position, now.size)
        raise self._fail(resp, "write", path, position=position)

    def _write_part(self, key: str, path: str, position: int, payload: bytes, view: SegmentView) -> None:
        name = part_key(key, view.segment_id, position)
        resp = self.client.upload(name, payload, None, what=f"write {path!r} at {position}",
                                  if_generation_match=0)
        if resp.status == 412:
            now = self._view(key, path)
            if now.sealed:
                raise SegmentSealed(path)
            raise PositionMismatch(path, position, now.size)
        if resp.status != 200:
            raise self._fail(resp, "write", path, position=position)
        generation = int(resp.json().get("generation", 0))
        if not self.capabilities.conditional_append:
            # The backend cannot exclude racing writers (an emulator ignoring
            # preconditions), so there is no race to confirm against: one writer's part
            # at the checked position always continues the chain.
            if len(view.chain) + 1 >= COMPACT_AT:
                self._compact(key, path, self._view(key, path), seal=False, best_effort=True)
            return
        # Confirm the part continues the chain: a writer racing with a compaction could
        # otherwise have uploaded a part at a position the base already covers.
        now = self._view(key, path)
        if any(p.name == name and p.generation == generation for p in now.chain):
            if len(now.chain) >= COMPACT_AT:
                self._compact(key, path, now, seal=False, best_effort=True)
            return
        if (not now.sealed and now.size >= position + len(payload)
                and self._read_view(key, path, now, position, len(payload)) == payload):
            return  # composed into the base by a concurrent compaction
        self.client.delete(name, what=f"withdraw part of {path!r}", if_generation_match=generation)
        if now.sealed:
            raise SegmentSealed(path)
        raise PositionMismatch(path, position, now.size)

    def _compact(self, key: str, path: str, view: SegmentView, *, seal: bool, best_effort: bool) -> None:
        """Compose the chain into the base, 31 parts a call; with ``seal``, mark it sealed."""
        generation, chain = view.generation, list(view.chain)
        done: list[str] = []
        meta = dict(view.metadata)
        try:
            while chain or seal:
                batch, chain = chain[:COMPOSE_BATCH], chain[COMPOSE_BATCH:]
                last = not chain
                if seal and last:
                    meta[META_SEALED] = "true"
                if batch:
                    resp = self._compose(key, path, batch, meta, generation)
                else:
                    resp = self.client.patch_metadata(key, meta, what=f"seal {path!r}",
                                                      if_generation_match=generation)
                if resp.status == 404:  # a part vanished: another writer compacted meanwhile
                    raise DriverError(f"gcs: parts of {path!r} in bucket {self.bucket!r} vanished during a "
                                      f"compose", retryable=True, bucket=self.bucket, path=path)
                if resp.status != 200:
                    raise self._fail(resp, "seal" if seal else "compose", path)
                generation = int(resp.json().get("generation", generation))
                done.extend(p.name for p in batch)
                if last:
                    break
        except DriverError:
            if not best_effort:
                raise
            log.info("gcs: compaction of %r deferred (backend unavailable)", path)
        for name in done + [p.name for p in view.garbage]:
            with contextlib.suppress(DriverError):
                self.client.delete(name, what=f"remove composed part of {path!r}")

    def _compose(self, key: str, path: str, batch: list, meta: dict, generation: int) -> Response:
        """One compose of the base and ``batch``; after a failure, whether it happened.

        A compose whose answer was lost may have happened, and sending it again would
        append the parts twice wherever the generation precondition is not enforced (the
        emulator). So it is never resent: after a transient failure or a 412 the base
        tells whether it landed (new generation, expected size); if not, the error goes
        up, and a retry of the whole operation starts from a fresh view.
        """
        expected = self._view(key, path).base_size + sum(p.size for p in batch)
        try:
            resp = self.client.compose(key, [key] + [p.name for p in batch], meta, what=f"compose {path!r}",
                                       if_generation_match=generation)
        except DriverError as exc:
            if not exc.retryable:
                raise
            failure: DriverError | None = exc
        else:
            if resp.status != 412:
                return resp
            failure = None
        now = self._view(key, path)
        if now.generation != generation and now.base_size == expected:
            return Response(200, json.dumps({"generation": str(now.generation)}).encode())  # only the answer was lost
        if failure is not None and now.generation == generation:
            raise failure
        raise DriverError(f"gcs: {path!r} in bucket {self.bucket!r} changed during a compose",
                          retryable=True, bucket=self.bucket, path=path)

    def read(self, path: str, position: int, length: int) -> bytes:
        key = self._key(path)
        for _attempt in range(3):
            view = self._view(key, path)
            if not view.exists:
                raise NotFound(path)
            try:
                return self._read_view(key, path, view, position, length)
            except _PieceGone:
                continue  # a concurrent compaction removed a part: look again
        raise DriverError(f"gcs: {path!r} in bucket {self.bucket!r} kept changing during a read",
                          retryable=True, bucket=self.bucket, path=path)

    def _read_view(self, key: str, path: str, view: SegmentView, position: int, length: int) -> bytes:
        if position + length > view.size:
            raise IllegalParam(f"read of {path!r} [{position}, {position + length}) passes its size {view.size}",
                               path=path, position=position, length=length)
        out = []
        end = position + length
        for name, start, size in view.pieces():
            lo, hi = max(position, start), min(end, start + size)
            if lo >= hi:
                continue
            resp = self.client.download(name, lo - start, hi - lo, what=f"read {path!r} at {lo}")
            if resp.status == 404:
                raise _PieceGone(name)
            if resp.status not in (200, 206):
                raise self._fail(resp, "read", path, position=lo)
            body = resp.body
            if resp.status == 200 and len(body) != hi - lo:  # server ignored the range
                body = body[lo - start:hi - start]
            if len(body) != hi - lo:
                raise DriverError(f"gcs: short read of {path!r} at {lo}: {len(body)} of {hi - lo} bytes",
                                  retryable=True, bucket=self.bucket, path=path)
            out.append(body)
        return b"".join(out)

    def seal(self, path: str) -> None:
        key = self._key(path)
        view = self._view(key, path)
        if not view.exists:
            raise NotFound(path, "cannot be sealed: it does not exist")
        if view.sealed:
            for part in view.garbage:
                with contextlib.suppress(DriverError):
                    self.client.delete(part.name, what=f"remove part of {path!r}")
            return
        if not view.segment_id:
            view.metadata[META_ID] = uuid.uuid4().hex
        self._compact(key, path, view, seal=True, best_effort=False)

    def delete(self, path: str) -> None:
        key = self._key(path)
        # Base first: from then on the size is 0 and leftover parts are garbage.
        resp = self.client.delete(key, what=f"delete {path!r}")
        if resp.status not in (200, 204, 404):
            raise self._fail(resp, "delete", path)
        status, items, _ = self.client.list(key + PART_MARK, what=f"list parts of {path!r}")
        if status != 200:
            raise self._fail(Response(status, b""), "delete", path)
        for item in items:
            resp = self.client.delete(item["name"], what=f"delete part of {path!r}")
            if resp.status not in (200, 204, 404):
                raise self._fail(resp, "delete", path)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        full = f"{self.root}/{prefix}" if self.root else prefix
        status, items, _ = self.client.list(full, what=f"list prefix {prefix!r}")
        if status != 200:
            raise self._fail(Response(status, b""), "list", prefix)
        out = []
        for key, group in group_listing(items).items():
            if self.root and not key.startswith(self.root + "/"):
                continue
            view = interpret(key, group)
            if view.exists:
                out.append((self._rel(key), view.size))
        return iter(sorted(out))

    def close(self) -> None:
        self.client.close()


class _PieceGone(Exception):
    pass


#: Declared gap of the emulator: it accepts ``ifGenerationMatch`` on compose and metadata
#: updates without enforcing it, so racing writers are not excluded by the backend.
EMULATOR_GAP = "fake-gcs-server does not enforce ifGenerationMatch"


def emulator_capabilities() -> Capabilities:
    """The capabilities to claim when running against fake-gcs-server."""
    return GcsDriver.capabilities.override(EMULATOR_GAP, conditional_append=False, create_if_absent=False)

