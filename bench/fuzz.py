"""Long fuzz runs of the targets in ``tests/test_fuzz.py`` (issue 9).

    python bench/fuzz.py --examples 100000 [--target NAME ...] [--seed 1] [--json]
    python bench/fuzz.py --list

Each target (decoders of the codec and the index, the config loaders, the metadata JSON
reader) gets ``--examples`` inputs, one target after another. The default engine is a
plain seeded ``random.Random`` loop over the targets' own generators (arbitrary input
and mutations of valid input), several times faster than hypothesis; ``--engine
hypothesis`` draws the same generators through hypothesis instead (``max_examples`` =
``--examples``, generation phase only).

An input fails when its call raises anything but a ``TieredStoreError`` (or an oracle
assertion), or runs past the per-input deadline (``--deadline``, a hang). Per target the
run prints the inputs run, failures, distinct failure kinds with one failing input each,
the elapsed time and the slowest input. The exit status is 1 when any input failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import random
import reprlib
import sys
import time
import traceback
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import test_fuzz  # noqa: E402  (the targets live with their tests)
from test_fuzz import TARGETS, FuzzTimeout, Target, hard_deadline  # noqa: E402


def _kind(exc: BaseException) -> str:
    """Exception type and the innermost frame inside the project, as a failure's identity."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f for f in reversed(frames) if "tiered_core" in f.filename), frames[-1] if frames else None)
    place = f"{os.path.relpath(where.filename, REPO)}:{where.lineno}" if where else "?"
    return f"{type(exc).__name__} at {place}"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 600
_REPR.maxlevel = 6


def _shown(value: Any) -> str:
    """A failing input for the report: bounded in length and depth (inputs nest thousands deep)."""
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} too large to show>"


class Runner:
    """Runs one target, counting inputs and grouping failures by kind."""

    def __init__(self, target: Target, deadline: float, show: int) -> None:
        self.target = target
        self.deadline = deadline
        self.show = show
        self.inputs = 0
        self.failures = 0
        self.kinds: dict[str, dict[str, Any]] = {}
        self.slowest = 0.0

    def one(self, value: Any) -> None:
        self.inputs += 1
        start = time.perf_counter()
        try:
            with hard_deadline(self.deadline):
                self.target.run(value)
        except FuzzTimeout as exc:
            self._fail(exc, value, "hang")
        except Exception as exc:  # noqa: BLE001 - every other exception is a finding
            self._fail(exc, value, _kind(exc))
        self.slowest = max(self.slowest, time.perf_counter() - start)

    def _fail(self, exc: BaseException, value: Any, kind: str) -> None:
        self.failures += 1
        entry = self.kinds.setdefault(kind, {"count": 0, "message": str(exc)[:300], "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < self.show:
            entry["examples"].append(_shown(value))


def run_random(target: Target, n: int, seed: int, deadline: float, show: int) -> Runner:
    runner = Runner(target, deadline, show)
    rng = random.Random(f"{seed}:{target.name}")
    for _ in range(n):
        state = rng.getstate()
        try:
            value = target.generate(rng)
        except Exception as exc:  # noqa: BLE001 - a generator bug is a bench bug: say so loudly
            rng.setstate(state)
            raise RuntimeError(f"generator of {target.name} failed") from exc
        runner.one(value)
    return runner


def run_hypothesis(target: Target, n: int, seed: int, deadline: float, show: int) -> Runner:
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    from hypothesis import strategies as st

    runner = Runner(target, deadline, show)

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(rng=st.randoms(use_true_random=False))
    def body(rng: random.Random) -> None:
        runner.one(target.generate(rng))

    body()
    return runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000, help="inputs per target (default 10000)")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), metavar="NAME",
                        help="run only this target (repeatable; default: all, see --list)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--engine", choices=("random", "hypothesis"), default="random",
                        help="input loop: seeded random.Random (default, faster) or hypothesis")
    parser.add_argument("--deadline", type=float, default=10.0,
                        help="seconds one input may take before it counts as a hang (default 10)")
    parser.add_argument("--show", type=int, default=1, help="failing inputs kept per failure kind (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, target in sorted(TARGETS.items()):
            print(f"{name:22} {target.doc}")
        return 0
    if args.examples <= 0:
        parser.error("--examples must be > 0")
    logging.disable(logging.CRITICAL)  # the stores log what they reject: millions of lines here
    engine = run_random if args.engine == "random" else run_hypothesis
    results = []
    for name in args.target or sorted(TARGETS):
        start = time.perf_counter()
        runner = engine(TARGETS[name], args.examples, args.seed, args.deadline, args.show)
        elapsed = time.perf_counter() - start
        result = {"target": name, "inputs": runner.inputs, "failures": runner.failures,
                  "elapsed_s": round(elapsed, 2), "inputs_per_s": round(runner.inputs / elapsed, 1) if elapsed else None,
                  "slowest_input_s": round(runner.slowest, 4), "failure_kinds": runner.kinds}
        results.append(result)
        if not args.json:
            print(f"{name:22} inputs {runner.inputs:>8}  failures {runner.failures:>6}  elapsed {elapsed:8.1f} s  "
                  f"({result['inputs_per_s']}/s, slowest input {runner.slowest:.3f} s)", flush=True)
            for kind, entry in runner.kinds.items():
                print(f"    {entry['count']:>6} x {kind}: {entry['message']}")
                for example in entry["examples"]:
                    print(f"           input: {example}")
    if args.json:
        print(json.dumps({"engine": args.engine, "seed": args.seed, "examples_per_target": args.examples,
                          "deadline_s": args.deadline, "python": sys.version.split()[0],
                          "hypothesis_examples_in_make_test": test_fuzz.EXAMPLES, "targets": results}, indent=2))
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
