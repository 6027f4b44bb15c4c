"""bench/soak.py end to end in well under a minute: producers, consumers, retention, index
uploads, a SIGKILL about every second, a restore of an old copy of the store directory and a
lost local disk with a failover to a new store_path, then the final verify from the tiered
store; and the verifier is not blind to a lost message, a reused offset, a consumer served
two messages at one offset or a skip over messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SOAK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "soak.py")


def history(work, event):
    with open(work / "history.jsonl") as fh:
        return [r for r in map(json.loads, fh) if r["event"] == event]


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and the posix driver")
def test_soak_survives_sigkills_lost_disk_and_restore(tmp_path):
    work = tmp_path / "soak"
    # kills 1..4: a copy at kill 1, restored at kill 2 (same owner: its history is trusted),
    # the disk lost at kill 3 (failover to store-1); no fault after the last kill
    proc = subprocess.run(
        [sys.executable, SOAK, "--minutes", "2", "--max-kills", "4", "--kill-every", "1", "--kill-during-open", "0",
         "--restore-every", "2", "--copy-age", "1", "--lose-disk-every", "3",
         "--retention-every", "0.3", "--index-roll-every", "0.5", "--lookups-per-s", "40",
         "--verify-lookups", "500", "--local-file-size", str(256 << 10), "--dir", str(work),
         "--json", "--quiet"],
        capture_output=True, text=True, timeout=170, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    r = json.loads(proc.stdout)
    assert r["failures"] == [] and r["ok"], r
    assert r["restarts"] == 4
    # `tiered verify --deep` of the final store finds nothing (every message read)
    assert r["tier_verify"]["exit_code"] == 0 and r["tier_verify"]["findings"] == [], r["tier_verify"]
    assert r["tier_verify"]["messages_read"] >= r["read_back"] > 0

    # both faults ran, as scheduled
    f = r["faults"]
    assert (f["lost_disk"], f["restore"], f["restore_same_owner"], f["store_paths"]) == (1, 1, 1, 2)
    restore, lost_disk = f["details"]
    assert (restore["kill"], restore["kind"], restore["take_over"], restore["trusted"]) == (2, "restore", False, True)
    assert (lost_disk["kill"], lost_disk["kind"], lost_disk["take_over"]) == (3, "lost_disk", True)
    assert not (work / "store-0").exists() and (work / "store-1").is_dir()
    runs = history(work, "run")
    assert [(h["run"], h["take_over"], h["rebuild"]) for h in runs] == [
        (0, False, False), (1, False, False), (2, False, True), (3, True, False)]

    # the accounting: every acknowledged message is read back or was taken by a fault (not
    # tiered when its disk went), and nothing else
    assert r["acknowledged"] > 0
    assert r["read_back"] + r["lost_with_disk"] == r["acknowledged"]
    assert r["lost_with_disk"] == sum(d["lost_with_disk"] for d in f["details"])
    assert [d["lost_with_disk"] for d in f["details"]] == [d["lost_at_fault"] for d in f["details"]]
    assert r["returned_after_loss"] == 0
    assert r["lost"] == r["duplicated"] == r["corrupted"] == r["misplaced"] == r["unreadable_offsets"] == 0
    assert r["offsets_reused"] == r["consumer_offset_conflicts"] == r["consumer_skipped_messages"] == 0
    assert r["tier_lag_violations"] == 0 and r["max_untiered_age_s"] <= 20
    # consumers read (their logs, which the check reads; the run's "consumed" is the children's
    # stats lines, which a kill under load can cut before the first one)
    assert r["consumed_records"] > 0 and r["consumed_vanished"] == 0 and r["order_violations"] == 0
    assert r["served_by_tier"] == {"tiered": r["messages_in_store"]}
    final = r["key_lookups"]["final"]
    assert final["sample"]["ok"] > 0
    assert final["sample"]["failed"] == final["at_restart_points"]["failed"] == 0

    # the verifier is not blind: inject into the logs (a) an acknowledged message the store
    # does not hold, (b) an ack that reuses an offset holding a message that stayed, (c) a
    # consumer that read another key at an offset within one run, (d) a skip over messages,
    # (e) an ack of run 0 past the tier end at the first fault (it went with the disk)
    # a queue whose offsets 0..5 were tiered before the disk was lost: they stay
    ends = [h for h in history(work, "fault") if h["kind"] == "lost_disk"][0]["tier_end"]
    name = max(ends, key=ends.get)
    assert ends[name] > 5
    with open(work / "acks" / "run-0000-p0.log", "a") as fh:
        fh.write(f"{name} {10 ** 6} r0p0n999999 0\n")  # (e)
    with open(work / "acks" / "run-0003-p0.log", "a") as fh:
        fh.write(f"{name} {10 ** 6 + 1} r3p0n999998 0\n")  # (a): far past the end of the queue
        fh.write(f"{name} 0 r3p0n999999 0\n")  # (b): offset 0 holds a message of run 0
    with open(work / "consumed" / "run-0001-c0.log", "a") as fh:
        fh.write(f"{name} 1 r1p1n999999\n")  # (c)
    with open(work / "skips" / "run-0002-c0.log", "a") as fh:
        fh.write(f"{name} 2 5\n")  # (d): offsets 2..4 hold messages
    again = subprocess.run([sys.executable, SOAK, "--role", "verify", "--dir", str(work),
                            "--store-path", str(work / "store-1")],
                           capture_output=True, text=True, timeout=120, check=True)
    v = json.loads(again.stdout.split("result ", 1)[1])
    assert v["lost"] == 2, v["examples"]  # (a), and (b) is not there either
    assert {e["key"] for e in v["examples"]["lost"]} == {"r3p0n999998", "r3p0n999999"}
    assert v["lost_with_disk"] == r["lost_with_disk"] + 1  # (e)
    # (b) and (c): a consumer saw r1p1n999999 at offset 1, which holds a message of run 0
    assert v["offsets_reused"] == 2
    assert {e["then"] for e in v["examples"]["offsets_reused"]} == {"r3p0n999999", "r1p1n999999"}
    assert v["consumer_offset_conflicts"] >= 1 and v["consumed_vanished"] == 1
    assert v["consumer_skipped_messages"] == 3
    assert v["read_back"] == r["read_back"]
