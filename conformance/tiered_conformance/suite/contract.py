"""(a) The driver contract: what every ``SegmentDriver`` guarantees, in the standard layers.

Input checks (invalid paths, positions, lengths) are the validating layer's part of the
contract, everything else the driver's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import threading
from typing import Any, Callable, Iterator

import pytest

from tiered_core.errors import IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver
from tiered_conformance import areas
from tiered_conformance.requirements import requires
from tiered_conformance.suite.base import ConformanceBase, backend_class, payload, read_all, run_threads, write_chunks

MIB = 1 << 20

#: Sizes for single-write round trips: tiny, around page and block boundaries, > 1 MiB.
ROUND_TRIP_SIZES = [1, 7, 4095, 4096, 4097, 65537, MIB + 3]

#: Paths every operation must reject with InvalidPath ("{p}" is the test's prefix).
INVALID_PATHS = {
    "empty": "",
    "absolute": "/{p}abs",
    "parent": "../{p}escape",
    "parent-inside": "{p}a/../../../escape",
    "dot": "{p}a/./b",
    "trailing-slash": "{p}dir/",
}


def _child_write(driver_cls: type[SegmentDriver], options: dict[str, Any], path: str, data: bytes) -> None:
    """Runs in a separate process: write ``data`` and exit."""
    drv = driver_cls(**options)
    try:
        drv.write(path, 0, data)
    finally:
        drv.close()


@contextlib.contextmanager
def _racing_pair(driver: SegmentDriver, capabilities: Capabilities) -> Iterator[tuple[SegmentDriver, SegmentDriver]]:
    """Two drivers on the same bytes: ``driver`` and a fresh instance when the backend
    is shared (``persistent``), else ``driver`` twice."""
    other = driver.reopen() if capabilities.persistent else driver
    try:
        yield driver, other
    finally:
        if other is not driver:
            other.close()


def _race(pair: tuple[SegmentDriver, SegmentDriver], attempt: Callable[[int, SegmentDriver], Any]) -> list[Any]:
    """``attempt(i, pair[i])`` on two threads released at the same instant; each outcome
    is what the attempt returned or the exception it raised."""
    barrier = threading.Barrier(2)
    outcome: list[Any] = [None, None]

    def run(idx: int) -> None:
        barrier.wait()
        try:
            outcome[idx] = attempt(idx, pair[idx])
        except BaseException as exc:  # reported by the caller's assertions
            outcome[idx] = exc

    run_threads(run, 2)
    return outcome


class DriverContractTests(ConformanceBase):
    """Every operation of the SPI against one backend, without the container layer."""

    tiered_area = areas.RAW_CONTRACT

    # -- round trips and sizes ----------------------------------------------------

    @pytest.mark.parametrize("size", ROUND_TRIP_SIZES, ids=lambda s: f"{s}B")
    def test_round_trip_single_write(self, driver, capabilities, prefix, size):
        path = prefix + "seg"
        data = payload(size, size)
        write_chunks(driver, capabilities, path, 0, data)
        assert driver.size(path) == size
        assert read_all(driver, path, size) == data

    def test_round_trip_many_unaligned_writes(self, driver, capabilities, prefix):
        path = prefix + "seg"
        sizes = [1, 3, 4096, 13, 65535, 2, 8191, 1, 100_003, 7]
        expected = b""
        for i, n in enumerate(sizes):
            chunk = payload(n, ("unaligned", i))
            write_chunks(driver, capabilities, path, len(expected), chunk)
            expected += chunk
        assert driver.size(path) == len(expected)
        assert read_all(driver, path, len(expected)) == expected

    def test_empty_write_creates_empty_object(self, driver, prefix):
        path = prefix + "empty"
        driver.write(path, 0, b"")
        assert driver.exists(path)
        assert driver.size(path) == 0
        driver.write(path, 0, b"x")
        assert driver.read(path, 0, 1) == b"x"

    def test_write_accepts_bytes_like(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, bytearray(b"abc"))
        driver.write(path, 3, memoryview(b"..defg..")[2:6])
        assert driver.read(path, 0, 7) == b"abcdefg"

    def test_read_returns_bytes(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"0123456789")
        got = driver.read(path, 2, 3)
        assert type(got) is bytes
        assert got == b"234"

    def test_size_after_every_write(self, driver, capabilities, prefix):
        path = prefix + "seg"
        size = 0
        for i in range(40):
            chunk = payload(1 + (i * 37) % 300, ("size", i))
            write_chunks(driver, capabilities, path, size, chunk)
            size += len(chunk)
            assert driver.size(path) == size, f"after write {i}"
            assert driver.read(path, size - len(chunk), len(chunk)) == chunk

    def test_absent_object_has_size_zero(self, driver, prefix):
        path = prefix + "absent"
        assert driver.size(path) == 0
        assert not driver.exists(path)

    def test_exists_after_create_and_write(self, driver, prefix):
        created, written = prefix + "created", prefix + "written"
        driver.create(created)
        driver.write(written, 0, b"x")
        assert driver.exists(created) and driver.size(created) == 0
        assert driver.exists(written) and driver.size(written) == 1

    def test_objects_are_independent(self, driver, prefix):
        a, b, c = prefix + "seg", prefix + "seg2", prefix + "other/seg"
        driver.write(a, 0, b"aaaa")
        driver.write(b, 0, b"bb")
        driver.write(c, 0, b"c")
        driver.write(a, 4, b"AA")
        assert (driver.size(a), driver.size(b), driver.size(c)) == (6, 2, 1)
        assert driver.read(b, 0, 2) == b"bb" and driver.read(c, 0, 1) == b"c"
        driver.delete(b)
        assert driver.read(a, 0, 6) == b"aaaaAA"

    def test_nested_and_rocketmq_style_paths(self, driver, prefix):
        paths = [
            prefix + "broker-a/%RETRY%group_1/0/CommitLog/00000000000000000000",
            prefix + "broker-a/topic.with.dots/12/ConsumeQueue/00000000000000001000",
            prefix + "a/b/c/d/e/f/g/deep",
        ]
        for i, path in enumerate(paths):
            driver.write(path, 0, payload(10 + i, path))
        for i, path in enumerate(paths):
            assert driver.size(path) == 10 + i
            assert driver.read(path, 0, 10 + i) == payload(10 + i, path)

    # -- positions ----------------------------------------------------------------

    @pytest.mark.parametrize("case", ["ahead", "behind", "rewrite-at-zero", "ahead-of-absent"])
    def test_write_at_wrong_position_raises(self, driver, prefix, case):
        path = prefix + "seg"
        stored = b"" if case == "ahead-of-absent" else b"0123456789"
        if stored:
            driver.write(path, 0, stored)
        position = {"ahead": 11, "behind": 5, "rewrite-at-zero": 0, "ahead-of-absent": 3}[case]
        with pytest.raises(PositionMismatch) as info:
            driver.write(path, position, b"XYZ")
        err = info.value
        assert err.actual_size == len(stored)
        assert err.position == position
        assert err.path == path
        assert driver.size(path) == len(stored), "a rejected write must store nothing"
        if stored:
            assert driver.read(path, 0, len(stored)) == stored

    def test_negative_position_rejected(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        with pytest.raises(IllegalParam):
            driver.write(path, -1, b"x")
        with pytest.raises(IllegalParam):
            driver.read(path, -1, 1)
        assert driver.size(path) == 3
        assert driver.read(path, 0, 3) == b"abc"

    @pytest.mark.parametrize("length", [0, -1])
    def test_non_positive_length_rejected(self, driver, prefix, length):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        with pytest.raises(IllegalParam):
            driver.read(path, 0, length)

    # -- ranged reads -------------------------------------------------------------

    def test_ranged_reads(self, driver, capabilities, prefix):
        path = prefix + "seg"
        data = payload(10_000, "ranged")
        write_chunks(driver, capabilities, path, 0, data)
        assert driver.read(path, 0, 1) == data[:1]
        assert driver.read(path, len(data) - 1, 1) == data[-1:]
        assert driver.read(path, 0, len(data)) == data
        assert driver.read(path, 4093, 7) == data[4093:4100]
        assert driver.read(path, 1, len(data) - 1) == data[1:]

    @pytest.mark.parametrize("case", ["one-past-whole", "straddles-end", "at-end", "beyond-end"])
    def test_read_past_end_raises(self, driver, prefix, case):
        path = prefix + "seg"
        driver.write(path, 0, b"0123456789")
        position, length = {"one-past-whole": (0, 11), "straddles-end": (9, 2),
                             "at-end": (10, 1), "beyond-end": (20, 1)}[case]
        with pytest.raises(IllegalParam):
            driver.read(path, position, length)

    def test_read_of_empty_object_raises(self, driver, prefix):
        path = prefix + "seg"
        driver.create(path)
        with pytest.raises(IllegalParam):
            driver.read(path, 0, 1)

    def test_read_missing_raises_not_found(self, driver, prefix):
        path = prefix + "missing"
        with pytest.raises(NotFound) as info:
            driver.read(path, 0, 1)
        assert info.value.path == path

    # -- seal -----------------------------------------------------------------------

    @requires.seal
    def test_write_after_seal_raises(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"sealed bytes")
        driver.seal(path)
        with pytest.raises(SegmentSealed) as info:
            driver.write(path, 12, b"more")
        assert info.value.path == path
        assert driver.size(path) == 12
        assert driver.read(path, 0, 12) == b"sealed bytes"

    @requires.seal
    def test_seal_keeps_reads_and_size(self, driver, capabilities, prefix):
        path = prefix + "seg"
        data = payload(70_001, "seal")
        write_chunks(driver, capabilities, path, 0, data)
        driver.seal(path)
        assert driver.size(path) == len(data)
        assert driver.exists(path)
        assert read_all(driver, path, len(data)) == data
        assert driver.read(path, len(data) - 1, 1) == data[-1:]

    @requires.seal
    def test_seal_is_idempotent(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        driver.seal(path)
        driver.seal(path)
        assert driver.size(path) == 3
        with pytest.raises(SegmentSealed):
            driver.write(path, 3, b"d")

    @requires.seal
    def test_is_sealed_reports_state(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        assert not driver.is_sealed(path)
        driver.seal(path)
        assert driver.is_sealed(path)

    @requires.seal
    def test_seal_empty_object(self, driver, prefix):
        path = prefix + "seg"
        driver.create(path)
        driver.seal(path)
        with pytest.raises(SegmentSealed):
            driver.write(path, 0, b"x")
        assert driver.size(path) == 0

    # -- create / delete ----------------------------------------------------------

    def test_create_is_idempotent_and_keeps_bytes(self, driver, prefix):
        path = prefix + "seg"
        driver.create(path)
        driver.create(path)
        assert driver.size(path) == 0
        driver.write(path, 0, b"abc")
        driver.create(path)
        assert driver.size(path) == 3
        assert driver.read(path, 0, 3) == b"abc"

    def test_delete_is_idempotent(self, driver, prefix):
        path = prefix + "seg"
        driver.delete(prefix + "never-existed")
        driver.write(path, 0, b"abc")
        driver.delete(path)
        driver.delete(path)
        assert not driver.exists(path)
        assert driver.size(path) == 0
        with pytest.raises(NotFound):
            driver.read(path, 0, 1)

    def test_delete_then_recreate_starts_empty(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"old bytes")
        driver.delete(path)
        with pytest.raises(PositionMismatch):
            driver.write(path, 9, b"x")
        driver.write(path, 0, b"new")
        assert driver.size(path) == 3
        assert driver.read(path, 0, 3) == b"new"

    @requires.seal
    def test_delete_sealed_object(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        driver.seal(path)
        driver.delete(path)
        assert not driver.exists(path)
        driver.write(path, 0, b"xy")
        assert driver.read(path, 0, 2) == b"xy"

    # -- list -----------------------------------------------------------------------

    @requires.list
    def test_list_prefix_sorted_with_sizes(self, driver, prefix):
        sizes = {"seg-2": 2, "seg-10": 10, "seg-1": 1, "dir/seg-3": 3, "dir2/x": 5, "empty": 0}
        for name, n in sizes.items():
            if n:
                driver.write(prefix + name, 0, payload(n, name))
            else:
                driver.create(prefix + name)
        got = list(driver.list(prefix))
        assert got == sorted((prefix + name, n) for name, n in sizes.items())

    @requires.list
    def test_list_narrow_prefix(self, driver, prefix):
        for name in ["seg-1", "seg-2", "segment", "other", "dir/seg-9"]:
            driver.write(prefix + name, 0, b"x" * len(name))
        assert list(driver.list(prefix + "seg-")) == [(prefix + "seg-1", 5), (prefix + "seg-2", 5)]
        assert list(driver.list(prefix + "dir/")) == [(prefix + "dir/seg-9", 9)]
        assert list(driver.list(prefix + "nothing-here")) == []

    @requires.list
    def test_list_reflects_writes_and_deletes(self, driver, prefix):
        a, b = prefix + "a", prefix + "b"
        driver.write(a, 0, b"1")
        driver.write(b, 0, b"22")
        driver.write(a, 1, b"111")
        assert list(driver.list(prefix)) == [(a, 4), (b, 2)]
        driver.delete(a)
        assert list(driver.list(prefix)) == [(b, 2)]

    @requires.list
    @pytest.mark.parametrize("bad", ["../", "/abs/", "a/../../"])
    def test_list_rejects_invalid_prefix(self, driver, bad):
        with pytest.raises(InvalidPath):
            list(driver.list(bad))

    # -- invalid input ------------------------------------------------------------

    @pytest.mark.parametrize("kind", list(INVALID_PATHS))
    def test_invalid_path_rejected(self, driver, capabilities, prefix, kind):
        bad = INVALID_PATHS[kind].format(p=prefix)
        calls = {
            "size": lambda: driver.size(bad),
            "exists": lambda: driver.exists(bad),
            "create": lambda: driver.create(bad),
            "write": lambda: driver.write(bad, 0, b"x"),
            "read": lambda: driver.read(bad, 0, 1),
            "seal": lambda: driver.seal(bad),
            "delete": lambda: driver.delete(bad),
            "write_if_absent": lambda: driver.write_if_absent(bad, b"x"),
        }
        for op, call in calls.items():
            with pytest.raises(InvalidPath) as info:
                call()
            assert info.value.path == bad, f"{op} must name the path"
        if capabilities.list:
            assert list(driver.list(prefix)) == [], "a rejected path must store nothing"

    def test_unknown_option_rejected(self, driver):
        with pytest.raises(InvalidOption) as info:
            backend_class(driver).coerce_options({"no_such_option_xyz": "1"})
        assert info.value.option == "no_such_option_xyz"
        assert "no_such_option_xyz" in str(info.value)

    def test_secret_options_redacted(self, driver, prefix):
        secrets = {k: str(driver.options[k]) for k in backend_class(driver).secret_options
                   if driver.options.get(k) not in (None, "") and len(str(driver.options[k])) >= 4}
        if not secrets:
            pytest.skip("driver declares no secret_options with a value in this run")
        shown = [repr(driver), str(driver.describe())]
        for exc_call in (lambda: driver.read(prefix + "missing", 0, 1),
                         lambda: driver.write(prefix + "missing", 5, b"x"),
                         lambda: driver.size("../escape")):
            try:
                exc_call()
            except Exception as exc:  # any error: its text must not leak a secret
                shown.append(str(exc))
                shown.append(repr(exc))
                # the standard layers replace a secret in an error's text (and say so): the
                # driver must not have put it there
                assert not getattr(exc, "secrets_redacted", False), \
                    f"the driver's error held the value of a secret option (the layers hid it): {exc}"
        for key, value in secrets.items():
            for text in shown:
                assert value not in text, f"value of secret option {key!r} leaked"

    # -- volume and concurrency ---------------------------------------------------

    def test_64_mib_over_many_writes(self, driver, capabilities, prefix):
        path = prefix + "big"
        chunk = min(MIB, capabilities.max_write_size or MIB)
        count = (64 * MIB) // chunk
        digest = hashlib.sha256()
        size = 0
        for i in range(count):
            data = payload(chunk, ("big", i))
            driver.write(path, size, data)
            size += chunk
            digest.update(data)
            assert driver.size(path) == size
        back = hashlib.sha256()
        for start in range(0, size, 4 * MIB):
            back.update(driver.read(path, start, min(4 * MIB, size - start)))
        assert size >= 64 * MIB
        assert back.hexdigest() == digest.hexdigest()

    def test_1000_small_writes(self, driver, prefix):
        path = prefix + "small"
        expected = bytearray()
        for i in range(1000):
            data = payload(1 + i % 29, ("small", i))
            driver.write(path, len(expected), data)
            expected += data
            assert driver.size(path) == len(expected), f"after write {i}"
        assert driver.read(path, 0, len(expected)) == bytes(expected)
        assert driver.read(path, 5000, 100) == bytes(expected[5000:5100])

    @requires.concurrent_paths
    def test_concurrent_writers_on_different_paths(self, driver, capabilities, prefix):
        threads, writes = 8, 30
        errors: list[BaseException] = []
        start = threading.Barrier(threads)

        def worker(t: int) -> None:
            try:
                path = f"{prefix}thread-{t}"
                start.wait()
                size = 0
                for i in range(writes):
                    data = payload(1 + (t * 131 + i * 17) % 5000, (t, i))
                    driver.write(path, size, data)
                    size += len(data)
            except BaseException as exc:
                errors.append(exc)

        run_threads(worker, threads)
        assert not errors, errors
        for t in range(threads):
            expected = b"".join(payload(1 + (t * 131 + i * 17) % 5000, (t, i)) for i in range(writes))
            path = f"{prefix}thread-{t}"
            assert driver.size(path) == len(expected)
            assert read_all(driver, path, len(expected)) == expected

    @requires.conditional_append
    def test_conditional_append_race(self, driver, capabilities, prefix):
        # Two writers (two driver instances when the backend is shared) race for the
        # same position: exactly one may win, the other learns the real size.
        with _racing_pair(driver, capabilities) as pair:
            for round_ in range(20):
                path = f"{prefix}race-{round_}"
                base = b"" if round_ % 2 == 0 else b"base"
                if base:
                    driver.write(path, 0, base)

                def attempt(idx: int, drv: SegmentDriver) -> bytes:
                    data = bytes([65 + idx]) * (8 + idx)
                    drv.write(path, len(base), data)
                    return data

                outcome = _race(pair, attempt)
                winners = [v for v in outcome if isinstance(v, bytes)]
                losers = [v for v in outcome if isinstance(v, PositionMismatch)]
                assert len(winners) == 1 and len(losers) == 1, f"round {round_}: {outcome}"
                assert losers[0].actual_size == len(base) + len(winners[0])
                assert driver.size(path) == len(base) + len(winners[0])
                assert driver.read(path, 0, driver.size(path)) == base + winners[0]

    # -- create if absent (tier-prefix ownership records) -------------------------

    def test_write_if_absent_creates_once(self, driver, capabilities, prefix):
        path = prefix + "claim"
        assert driver.write_if_absent(path, b"first") is True
        assert driver.write_if_absent(path, b"second, longer") is False
        assert driver.size(path) == 5
        assert driver.read(path, 0, 5) == b"first", "a refused write_if_absent must change nothing"
        if capabilities.list:
            assert list(driver.list(prefix)) == [(path, 5)], "no scratch object may show in a listing"

    def test_write_if_absent_refuses_existing_object(self, driver, prefix):
        empty, full = prefix + "empty", prefix + "full"
        driver.create(empty)
        driver.write(full, 0, b"data")
        assert driver.write_if_absent(empty, b"x") is False
        assert driver.write_if_absent(full, b"x") is False
        assert driver.size(empty) == 0 and driver.read(full, 0, 4) == b"data"

    def test_write_if_absent_rejects_empty_data(self, driver, prefix):
        with pytest.raises(IllegalParam):
            driver.write_if_absent(prefix + "nothing", b"")

    @requires.create_if_absent
    def test_write_if_absent_race(self, driver, capabilities, prefix):
        # Racing creators (two driver instances when the backend is shared): exactly one
        # wins, and the object holds the winner's bytes whole.
        with _racing_pair(driver, capabilities) as pair:
            for round_ in range(20):
                path = f"{prefix}claim-{round_}"

                def attempt(idx: int, drv: SegmentDriver) -> tuple[bool, bytes]:
                    data = bytes([65 + idx]) * (16 + idx)
                    return drv.write_if_absent(path, data), data

                outcome = _race(pair, attempt)
                assert all(isinstance(v, tuple) for v in outcome), f"round {round_}: {outcome}"
                winners = [data for won, data in outcome if won]
                assert len(winners) == 1, f"round {round_}: {outcome}"
                assert driver.read(path, 0, driver.size(path)) == winners[0]

    # -- a fresh instance ---------------------------------------------------------

    @requires.persistent
    def test_fresh_instance_sees_same_bytes(self, driver, capabilities, prefix):
        path = prefix + "seg"
        data = payload(200_001, "fresh")
        write_chunks(driver, capabilities, path, 0, data)
        fresh = driver.reopen()
        try:
            assert fresh is not driver
            assert fresh.exists(path)
            assert fresh.size(path) == len(data)
            assert read_all(fresh, path, len(data)) == data
            fresh.write(path, len(data), b"tail")
        finally:
            fresh.close()
        assert driver.size(path) == len(data) + 4
        assert driver.read(path, len(data), 4) == b"tail"

    @requires.persistent
    @requires.seal
    def test_fresh_instance_sees_seal(self, driver, prefix):
        path = prefix + "seg"
        driver.write(path, 0, b"abc")
        driver.seal(path)
        fresh = driver.reopen()
        try:
            with pytest.raises(SegmentSealed):
                fresh.write(path, 3, b"d")
            assert fresh.is_sealed(path)
            assert fresh.read(path, 0, 3) == b"abc"
        finally:
            fresh.close()

    @requires.persistent
    @requires.list
    def test_fresh_instance_lists_objects(self, driver, prefix):
        driver.write(prefix + "a", 0, b"1")
        driver.write(prefix + "b", 0, b"22")
        fresh = driver.reopen()
        try:
            assert list(fresh.list(prefix)) == [(prefix + "a", 1), (prefix + "b", 2)]
        finally:
            fresh.close()

    @requires.survives_process_exit
    def test_bytes_survive_process_exit(self, driver, prefix):
        path = prefix + "from-child"
        data = payload(3333, "child")
        ctx = multiprocessing.get_context("spawn")
        child = ctx.Process(target=_child_write, args=(backend_class(driver), dict(driver.options), path, data),
                            daemon=True)
        child.start()
        child.join(300)
        if child.is_alive():  # never leave a stuck child behind to hang this process's exit
            child.kill()
            child.join(10)
            pytest.fail("the writer child process did not finish within 300 s")
        assert child.exitcode == 0, f"child process failed (exit code {child.exitcode})"
        assert driver.size(path) == len(data)
        assert driver.read(path, 0, len(data)) == data
