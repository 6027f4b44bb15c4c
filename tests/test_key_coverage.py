"""The key index's coverage record (tiered_core/index/coverage.py)."""

from __future__ import annotations

import json

from tiered_core.index.coverage import COVERAGE_FILE, KeyCoverage


def test_marks_round_trip_and_only_grow(tmp_path):
    cov = KeyCoverage(str(tmp_path))
    assert not cov.known  # no record: unknown, not "nothing covered"
    cov.declare_known()
    cov.mark("t", 0, 10)
    cov.mark("t", 0, 4)  # never lowered
    cov.mark("t", 1, 3)
    cov.save()
    again = KeyCoverage(str(tmp_path))
    assert again.known and (again.get("t", 0), again.get("t", 1), again.get("u", 0)) == (10, 3, None)


def test_an_unknown_record_is_never_written_and_an_unreadable_one_is_unknown(tmp_path):
    cov = KeyCoverage(str(tmp_path))
    cov.mark("t", 0, 10)
    cov.save()
    assert not (tmp_path / COVERAGE_FILE).exists()  # marks over an unknown past say nothing
    (tmp_path / COVERAGE_FILE).write_text("{garbage")
    assert not KeyCoverage(str(tmp_path)).known
    (tmp_path / COVERAGE_FILE).write_text(json.dumps({"queues": [["t", "0", 1]]}))
    assert not KeyCoverage(str(tmp_path)).known


def test_invalidate_removes_the_record_and_saves_are_rate_limited(tmp_path):
    cov = KeyCoverage(str(tmp_path))
    cov.declare_known()
    cov.mark("t", 0, 1)
    cov.save(min_interval_s=3600)  # the first save is never held back
    cov.mark("t", 0, 2)
    cov.save(min_interval_s=3600)  # too soon: the record keeps 1
    assert KeyCoverage(str(tmp_path)).get("t", 0) == 1
    cov.save()
    assert KeyCoverage(str(tmp_path)).get("t", 0) == 2
    cov.invalidate()  # e.g. a local index file was found corrupt
    cov.save()
    assert not (tmp_path / COVERAGE_FILE).exists() and not KeyCoverage(str(tmp_path)).known


def test_read_only_never_writes(tmp_path):
    cov = KeyCoverage(str(tmp_path), read_only=True)
    cov.declare_known()
    cov.mark("t", 0, 1)
    cov.save()
    assert list(tmp_path.iterdir()) == []
