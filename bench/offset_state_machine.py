"""Long run of the offset state machine (``tests/offset_machine.py``, issue 18).

    python bench/offset_state_machine.py --steps 20000 --json

Runs the hypothesis state machine over put, dispatch (all queues or one), local expiry,
snapshots of the store directory, a lost local disk taken over, a failover to a new
``store_path``, restores of old snapshots (metadata rebuilt), lost metadata rebuilt and
plain reopens, in batches of ``--examples`` machines of up to ``--steps-per-example`` steps,
until ``--steps`` steps ran. After every step the machine checks that each acknowledged
live message reads back its own body; every put checks that its offset names no live
message and nothing the tier ever held.

Figures: ``steps`` (rule steps run), ``examples`` (machines run), ``violations`` (0, or 1
with ``falsifying`` naming the failing steps: hypothesis stops at the first), ``seconds``.
Exit code 0 when there was no violation, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from offset_machine import STEPS, OffsetMachine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20_000, help="rule steps to run in all (default 20000)")
    parser.add_argument("--examples", type=int, default=20, help="machines per hypothesis batch (default 20)")
    parser.add_argument("--steps-per-example", type=int, default=60, help="most steps of one machine (default 60)")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing example (slow)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the recovery paths warn by design; the figures say what happened
    phases = [Phase.generate, Phase.target] + ([Phase.shrink] if args.shrink else [])
    batch = settings(max_examples=args.examples, stateful_step_count=args.steps_per_example, deadline=None,
                     database=None, phases=phases, suppress_health_check=list(HealthCheck))
    started = time.monotonic()
    examples = 0
    falsifying = None
    while STEPS[0] < args.steps and falsifying is None:
        before = STEPS[0]
        try:
            run_state_machine_as_test(OffsetMachine, settings=batch)
        except Exception as exc:  # noqa: BLE001 - a violation or an unexpected error: both are findings
            falsifying = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            notes = getattr(exc, "__notes__", [])
            if notes:
                falsifying += "\n" + "\n".join(notes)
        examples += args.examples
        if not args.json:
            print(f"{STEPS[0]:,} steps ({STEPS[0] - before:,} in this batch), "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    figures = {"steps": STEPS[0], "examples": examples, "violations": 0 if falsifying is None else 1,
               "seconds": round(time.monotonic() - started, 1)}
    if falsifying is not None:
        figures["falsifying"] = falsifying
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")
    return 0 if falsifying is None else 1


if __name__ == "__main__":
    sys.exit(main())
