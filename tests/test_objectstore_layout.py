"""The shared object-store layout (tiered_core.spi.objectstore) over an in-process object store.

``ObjectMemory`` is a real backend, not a mock: a dict of immutable objects behind a lock
that enforces exclusive create and version preconditions the way S3 and GCS do. It
runs the whole conformance suite in the three shapes a backend can take (server-side
consolidation like GCS; none, like S3 or a plain filesystem; listings without custom
metadata, like S3), and the layout's own cases: a seal that keeps its parts, stale
writers, a create resent after a lost answer.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pytest

from tiered_conformance import DriverConformance
from tiered_core.errors import DriverError, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi import Capabilities
from tiered_core.spi.objectstore import META_SEALED, META_SEALED_SIZE, PART_MARK, ChainedObjectDriver, ObjectInfo
from tiered_core.spi.objectstore.layout import interpret, part_key


@dataclass
class _Obj:
    data: bytes
    version: int
    metadata: dict[str, str] = field(default_factory=dict)


class _Space:
    def __init__(self) -> None:
        self.objects: dict[str, _Obj] = {}
        self.lock = threading.Lock()
        self.counter = 0

    def next_version(self) -> int:
        self.counter += 1
        return self.counter


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


class ObjectMemory(ChainedObjectDriver):
    """The layout over an in-process object store that enforces its preconditions."""

    name = "objectstore-memory"
    capabilities = Capabilities(conditional_append=True, atomic_write=True, create_if_absent=True,
                                survives_process_exit=False)

    def __init__(self, *, space: str, prefix: str = "", consolidate: bool = False,
                 listing_metadata: bool = True) -> None:
        with _SPACES_LOCK:
            self.space = _SPACES.setdefault(space, _Space())
        self._set_root(prefix)
        self.can_consolidate = consolidate
        self.listing_metadata = listing_metadata
        self.requests: list[str] = []

    def _info(self, name: str, obj: _Obj, *, with_metadata: bool = True) -> ObjectInfo:
        return ObjectInfo(name, len(obj.data), str(obj.version), dict(obj.metadata) if with_metadata else None,
                          f"len{len(obj.data)}-{hash(obj.data)}")

    def _list_objects(self, prefix: str, *, what: str) -> list[ObjectInfo]:
        self.requests.append(what)
        with self.space.lock:
            return [self._info(n, o, with_metadata=self.listing_metadata)
                    for n, o in sorted(self.space.objects.items()) if n.startswith(prefix)]

    def _stat_object(self, name: str, *, what: str) -> ObjectInfo | None:
        self.requests.append("stat " + what)
        with self.space.lock:
            obj = self.space.objects.get(name)
            return None if obj is None else self._info(name, obj)

    def _create_object(self, name: str, data: bytes, metadata: Mapping[str, str] | None, *,
                       what: str) -> ObjectInfo | None:
        self.requests.append(what)
        with self.space.lock:
            if name in self.space.objects:
                return None
            obj = self.space.objects[name] = _Obj(bytes(data), self.space.next_version(), dict(metadata or {}))
            return self._info(name, obj)

    def _read_object(self, name: str, start: int, length: int, *, what: str) -> bytes:
        self.requests.append(what)
        with self.space.lock:
            obj = self.space.objects.get(name)
            if obj is None or start >= len(obj.data):
                raise NotFound(name)
            return obj.data[start:start + length]

    def _delete_object(self, name: str, *, version: str | None = None, what: str) -> bool:
        self.requests.append(what)
        with self.space.lock:
            obj = self.space.objects.get(name)
            if obj is None or (version is not None and str(obj.version) != version):
                return False
            del self.space.objects[name]
            return True

    def _update_metadata(self, name: str, metadata: Mapping[str, str], *, version: str,
                         what: str) -> ObjectInfo | None:
        self.requests.append(what)
        with self.space.lock:
            obj = self.space.objects.get(name)
            if obj is None or str(obj.version) != version:
                return None
            obj.metadata.update(metadata)
            obj.version = self.space.next_version()
            return self._info(name, obj)

    def _consolidate(self, name: str, sources: Sequence[ObjectInfo], metadata: Mapping[str, str], *,
                     version: str, what: str) -> ObjectInfo | None:
        assert self.can_consolidate and len(sources) + 1 <= self.max_consolidate_sources
        self.requests.append(what)
        with self.space.lock:
            obj = self.space.objects.get(name)
            if obj is None or str(obj.version) != version:
                return None
            missing = [s.name for s in sources if s.name not in self.space.objects]
            if missing:
                raise NotFound(missing[0])
            data = obj.data + b"".join(self.space.objects[s.name].data for s in sources)
            new = self.space.objects[name] = _Obj(data, self.space.next_version(), dict(metadata))
            return self._info(name, new)


SHAPES = {
    "consolidating": {"consolidate": True},
    "parts-kept": {"consolidate": False},
    "listing-without-metadata": {"consolidate": False, "listing_metadata": False},
}


class TestObjectMemoryConformance(DriverConformance):
    @pytest.fixture(params=sorted(SHAPES))
    def driver(self, request):
        drv = ObjectMemory(space=uuid.uuid4().hex, prefix="root", **SHAPES[request.param])
        yield drv
        drv.close()


@pytest.fixture(params=sorted(SHAPES))
def store(request) -> ObjectMemory:
    return ObjectMemory(space=uuid.uuid4().hex, prefix="p", **SHAPES[request.param])


def objects(drv: ObjectMemory) -> dict[str, _Obj]:
    return dict(drv.space.objects)


def fill(drv: ObjectMemory, path: str, count: int) -> bytes:
    out = bytearray()
    for i in range(count):
        chunk = f"<{i:03d}>".encode()
        drv.write(path, len(out), chunk)
        out += chunk
    return bytes(out)


def test_parts_chain_and_seal_per_backend_shape(store):
    data = fill(store, "seg", 70)  # past compact_at: a consolidating backend composes once
    parts = [n for n in objects(store) if PART_MARK in n]
    if store.can_consolidate:
        assert len(parts) < store.compact_at
    else:
        assert len(parts) == 69  # the first write is the base, every later one a part
    assert store.size("seg") == len(data) and store.read("seg", 0, len(data)) == data
    store.seal("seg")
    base = objects(store)[store._key("seg")]
    assert base.metadata[META_SEALED] == "true"
    if store.can_consolidate:
        assert [n for n in objects(store)] == [store._key("seg")] and base.data == data
        assert META_SEALED_SIZE not in base.metadata  # the layout today's GCS objects have
    else:
        assert base.metadata[META_SEALED_SIZE] == str(len(data))  # the parts stay, counted up to it
    fresh = store.reopen()
    assert fresh.is_sealed("seg") and fresh.size("seg") == len(data) and fresh.read("seg", 0, len(data)) == data
    assert dict(fresh.list("")) == {"seg": len(data)}
    with pytest.raises(SegmentSealed):
        fresh.write("seg", len(data), b"more")


def test_a_part_past_the_sealed_size_is_never_counted(store):
    data = fill(store, "seg", 5)
    store.seal("seg")
    view = store._view(store._key("seg"), "seg")
    # A stale writer's part at the sealed end, created after the seal: garbage.
    stray = part_key(store._key("seg"), view.segment_id, len(data))
    assert store._create_object(stray, b"late", None, what="test") is not None
    assert store.size("seg") == len(data) and store.read("seg", 0, len(data)) == data
    store.seal("seg")  # idempotent; removes the garbage
    assert stray not in objects(store)


def test_stale_writer_racing_the_seal_is_refused_and_withdrawn(store):
    data = fill(store, "seg", 3)
    real_create = store._create_object

    def seal_first(name, payload, metadata, *, what):
        if PART_MARK in name and not store.is_sealed("seg"):
            store.reopen().seal("seg")  # another instance seals between the check and the upload
        return real_create(name, payload, metadata, what=what)

    store._create_object = seal_first
    with pytest.raises(SegmentSealed):
        store.write("seg", len(data), b"late")
    assert store.size("seg") == len(data)
    assert all(not n.endswith(f"{len(data):020d}") for n in objects(store))  # withdrawn


@pytest.mark.parametrize("same_bytes", [False, True])
def test_stale_writer_racing_a_compaction_is_rejected(same_bytes):
    """A checks the size (P); B writes at P and consolidates, deleting the part at P; A's
    exclusive create of the part at P then succeeds but lies inside the base: A must not
    report success for bytes that are not there."""
    a = ObjectMemory(space=uuid.uuid4().hex, consolidate=True)
    b = a.reopen()
    data = fill(b, "seg", a.compact_at)
    position, theirs = len(data), b"<B-b>"
    mine = theirs if same_bytes else b"<A-a>"
    real_create = a._create_object

    def after_b(name, payload, metadata, *, what):
        if PART_MARK in name and not b.size("seg") > position:
            b.write("seg", position, theirs)  # B wins the position and compacts
        return real_create(name, payload, metadata, what=what)

    a._create_object = after_b
    if same_bytes:
        a.write("seg", position, mine)  # the bytes at P are A's bytes: success is true
    else:
        with pytest.raises(PositionMismatch) as info:
            a.write("seg", position, mine)
        assert info.value.actual_size == position + len(theirs)
    assert b.read("seg", 0, position + len(theirs)) == data + theirs
    assert len([n for n in objects(b) if PART_MARK in n]) < a.compact_at


def test_a_create_resent_after_a_lost_answer_is_recognised_as_its_own(store):
    """The transport resends a create whose answer was lost; the resend finds the first
    attempt's object and reports it exists. The write is not failed for it."""
    real_create = store._create_object

    def lost_then_resent(name, payload, metadata, *, what):
        assert real_create(name, payload, metadata, what=what) is not None  # landed...
        return real_create(name, payload, metadata, what=what)  # ...the resend finds it

    store._create_object = lost_then_resent
    store.write("seg", 0, b"base")
    store.write("seg", 4, b"-part")
    assert store.write_if_absent("owner", b"me") is True
    store._create_object = real_create
    assert store.read("seg", 0, 9) == b"base-part" and store.read("owner", 0, 2) == b"me"
    assert store.write_if_absent("owner", b"me") is False  # now it exists


def test_someone_elses_part_at_the_position_is_a_position_mismatch(store):
    store.write("seg", 0, b"base")
    view = store._view(store._key("seg"), "seg")
    assert store._create_object(part_key(store._key("seg"), view.segment_id, 4), b"other", None,
                                what="test") is not None
    with pytest.raises(PositionMismatch) as info:
        store.write("seg", 4, b"mine!")
    assert info.value.actual_size == 9 and store.read("seg", 4, 5) == b"other"


def test_listing_without_metadata_asks_for_the_base_only_when_needed():
    drv = ObjectMemory(space=uuid.uuid4().hex, listing_metadata=False)
    drv.write("plain", 0, b"one object")
    drv.write("chained", 0, b"ab")
    drv.write("chained", 2, b"cd")
    drv.requests.clear()
    assert list(drv.list("")) == [("chained", 4), ("plain", 10)]
    assert [r for r in drv.requests if r.startswith("stat")] == ["stat look up 'chained'"]


def test_crash_leftovers_are_never_counted_without_consolidation():
    drv = ObjectMemory(space=uuid.uuid4().hex)
    drv.write("seg", 0, b"AAAA")
    drv.write("seg", 4, b"BBBB")
    key = drv._key("seg")
    view = drv._view(key, "seg")
    gap = part_key(key, view.segment_id, 100)
    drv._create_object(gap, b"gap", None, what="test")  # after a gap: no writer of the layout makes one
    drv._create_object(part_key(key, "0ld", 8), b"old", None, what="test")  # a deleted predecessor's, or not
    assert drv.size("seg") == 8 and dict(drv.list("")) == {"seg": 8}
    drv.seal("seg")
    assert gap in objects(drv) and drv.size("seg") == 8
    drv.delete("seg")
    # the segment's own objects are gone; a part of another id, or after a gap, is kept (nothing tells whose)
    assert sorted(objects(drv)) == sorted([part_key(key, "0ld", 8), gap])
    assert not drv.exists("seg") and drv.size("seg") == 0


def test_interpret_keeps_old_sealed_objects_consolidated():
    """A sealed base without tiered-sealed-size (today's GCS seal) counts no part."""
    key = "k"
    infos = [ObjectInfo(key, 10, "1", {"tiered-segment-id": "s", META_SEALED: "true"}),
             ObjectInfo(part_key(key, "s", 10), 5, "2")]
    view = interpret(key, infos)
    assert view.sealed and view.size == 10 and [p.position for p in view.garbage] == [10]


def test_errors_of_a_consolidation_surface_typed():
    drv = ObjectMemory(space=uuid.uuid4().hex, consolidate=True)
    fill(drv, "seg", 4)
    real = drv._consolidate

    def fails(*args, **kwargs):
        raise DriverError("injected", retryable=True)

    drv._consolidate = fails
    with pytest.raises(DriverError) as info:
        drv.seal("seg")  # nothing happened: the original failure goes up
    assert info.value.retryable and "injected" in str(info.value)
    drv._consolidate = real
    drv.seal("seg")
    assert drv.is_sealed("seg") and drv.size("seg") == 20


def test_a_failed_delete_ends_the_clean_up_and_the_next_compaction_finishes_it():
    """After a compose, its parts are deleted one by one. When the backend fails a delete (it
    went down), the clean-up stops there instead of spending every other part's retries on
    it; the leftovers are garbage, never counted, and the next compaction removes them."""
    drv = ObjectMemory(space=uuid.uuid4().hex, consolidate=True)
    real = drv._delete_object
    attempts: list[str] = []

    def down(name, **kwargs):
        attempts.append(name)
        raise DriverError("injected: backend down", retryable=True)

    drv._delete_object = down
    data = fill(drv, "seg", drv.compact_at + 1)  # one compose of the base and its parts
    assert len(attempts) == 1  # not one per composed part
    leftovers = [n for n in objects(drv) if PART_MARK in n]
    assert len(leftovers) >= drv.compact_at - 1
    assert drv.size("seg") == len(data) and drv.read("seg", 0, len(data)) == data  # never counted twice

    drv._delete_object = real
    drv.seal("seg")  # the next compaction (here the seal's) removes the leftovers
    assert [n for n in objects(drv) if PART_MARK in n] == []
    assert drv.size("seg") == len(data) and drv.read("seg", 0, len(data)) == data
