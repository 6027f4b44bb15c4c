"""The finding record of verify/repair: every kind declared once, the exit status it calls for,
and a round trip through the JSON form (what Spark tasks and ``--json`` carry)."""

from __future__ import annotations

import json

import pytest

from tiered_core.ops.findings import KINDS, Finding, FindingKind, Severity, VerifyReport


def test_every_kind_is_declared_with_a_fix():
    assert set(KINDS) == set(FindingKind)
    for kind, info in KINDS.items():
        assert info.fix and info.area in {"ownership", "listing", "queue", "index", "local"}, kind


@pytest.mark.parametrize("kinds, code", [
    ((), 0),
    ((FindingKind.LOCAL_PENDING, FindingKind.UNCOMMITTED_TAIL), 0),
    ((FindingKind.LOCAL_PENDING, FindingKind.SEALED_MISMATCH), 1),
    ((FindingKind.OWNER_OTHER,), 1),
    ((FindingKind.SEALED_MISMATCH, FindingKind.CORRUPT_MESSAGE), 4),
    ((FindingKind.MISSING_OBJECT,), 4),
])
def test_exit_code_follows_the_worst_severity(kinds, code):
    report = VerifyReport("p/", deep=True)
    report.extend(Finding(k, "s", "d") for k in kinds)
    assert report.exit_code == code
    assert report.summary()["exit_code"] == code


def test_finding_round_trips_through_json():
    f = Finding(FindingKind.CORRUPT_MESSAGE, "c/b/t/0/commitlog/0", "CRC mismatch", "t", 0, (5, 6), (100, 180),
                {"reason": "crc"})
    back = Finding.from_dict(json.loads(json.dumps(f.as_dict())))
    assert back == f and back.facts == {"reason": "crc"} and back.fix == f.fix
    custom = Finding(FindingKind.UNLISTED_OBJECT, "x", "y", fix_text="move it")
    assert Finding.from_dict(custom.as_dict()).fix == "move it"
    assert f.severity is Severity.CORRUPT and not f.mendable
