"""bench/store.py runs and prints its five figures (a tiny run on the memory driver; no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "store.py")
FIGURES = ("put_msgs_per_s", "dispatch_ratio_vs_raw", "group_commit_speedup", "cold_read_ratio_vs_raw",
           "warm_read_msgs_per_s")


def test_bench_store_prints_the_five_figures(tmp_path):
    out = subprocess.run([sys.executable, BENCH, "--driver", "memory", "--json", "--messages", "400",
                          "--single-messages", "40", "--rounds", "1", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(out.stdout)
    assert result["driver"] == "memory" and result["messages"] == 400
    for name in FIGURES:
        assert result[name] > 0, (name, result)
    assert os.listdir(tmp_path) == []  # the run cleans up after itself
