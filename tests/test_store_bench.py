"""bench/store.py runs and prints every figure with its floor and ratio, per implementation
(a tiny run on the memory driver; no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "store.py")
TINY = ("--driver", "memory", "--json", "--messages", "400", "--single-messages", "40", "--rounds", "1")
FIGURES = ("put_us_per_msg", "put_floor_us_per_msg", "put_ratio", "put_msgs_per_s", "put_reput_msgs_per_s",
           "dispatch_us_per_msg", "dispatch_floor_us_per_msg", "dispatch_ratio", "dispatch_msgs_per_s",
           "cold_read_fetch_us_per_msg", "cold_read_api_us_per_msg", "cold_read_floor_us_per_msg",
           "cold_read_fetch_ratio", "cold_read_api_ratio", "warm_read_msgs_per_s", "group_commit_speedup")


def bench(tmp_path, *args: str) -> dict:
    out = subprocess.run([sys.executable, BENCH, *TINY, "--workdir", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=300, check=True)
    assert os.listdir(tmp_path) == []  # the run cleans up after itself
    return json.loads(out.stdout)


def assert_figures(result: dict) -> None:
    assert result["driver"] == "memory" and result["messages"] == 400
    for name in FIGURES:
        assert result[name] > 0, (name, result)
    assert result["put_reput_paused"] is True
    for name, check in result["checks"].items():
        assert check["value"] == result[name] and check["result"] in ("PASS", "FAIL"), (name, check)


def test_bench_store_pure_python_prints_every_figure(tmp_path):
    result = bench(tmp_path, "--impl", "pure")
    assert result["implementation"] == "pure-python"
    assert_figures(result)
    assert set(result["checks"]) >= {"dispatch_ratio", "cold_read_api_ratio"}


def test_bench_store_both_reports_compiled_or_says_it_is_unavailable(tmp_path):
    result = bench(tmp_path, "--impl", "both")
    compiled, pure = result["results"]
    assert pure["implementation"] == "pure-python"
    assert_figures(pure)
    if compiled.get("available", True):
        assert compiled["implementation"] == "compiled"
        assert_figures(compiled)
        assert set(compiled["checks"]) >= {"dispatch_ratio", "cold_read_fetch_ratio", "cold_read_api_ratio",
                                           "put_ratio", "put_reput_msgs_per_s"}
    else:
        assert compiled["implementation"] == "compiled" and compiled["reason"]
