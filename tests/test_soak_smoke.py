"""bench/soak.py end to end in a few seconds: producers, consumers, retention, index
uploads, a SIGKILL about every second, then the final verify from the tiered store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SOAK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "soak.py")


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and the posix driver")
def test_soak_survives_sigkills_without_losing_or_duplicating(tmp_path):
    work = tmp_path / "soak"
    proc = subprocess.run(
        [sys.executable, SOAK, "--minutes", "0.05", "--kill-every", "1", "--kill-during-open", "0",
         "--retention-every", "0.3", "--index-roll-every", "0.5", "--lookups-per-s", "40",
         "--verify-lookups", "500", "--local-file-size", str(256 << 10), "--dir", str(work),
         "--json", "--quiet"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    r = json.loads(proc.stdout)
    assert r["failures"] == [] and r["ok"], r
    assert r["restarts"] >= 1
    assert r["acknowledged"] > 0 and r["read_back"] == r["acknowledged"]
    assert r["lost"] == r["duplicated"] == r["corrupted"] == r["misplaced"] == r["unreadable_offsets"] == 0
    assert r["consumed"] > 0 and r["consumed_vanished"] == 0 and r["order_violations"] == 0
    assert r["served_by_tier"] == {"tiered": r["messages_in_store"]}
    final = r["key_lookups"]["final"]
    assert final["sample"]["ok"] > 0 and final["at_restart_points"]["ok"] > 0
    assert final["sample"]["failed"] == final["at_restart_points"]["failed"] == 0

    # the verifier is not blind: an acknowledged message that is not in the store is lost
    with open(work / "acks" / "run-0000-p0.log", "a") as fh:
        fh.write("soak-0 0 3 r999p0n1\n")
    again = subprocess.run([sys.executable, SOAK, "--role", "verify", "--dir", str(work)],
                           capture_output=True, text=True, timeout=120, check=True)
    v = json.loads(again.stdout.split("result ", 1)[1])
    assert v["lost"] == 1 and v["examples"]["lost"] == [{"key": "r999p0n1", "acked_at": ["soak-0", 0, 3]}]
    assert v["read_back"] == r["acknowledged"]
