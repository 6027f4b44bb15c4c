"""``tiered conformance NAME [--option k=v ...] [--capability f=v[:reason] ...]``.

Runs the conformance suite (the ``tiered-conformance`` distribution) against driver
``NAME`` in this process, exactly as ``pytest --pyargs tiered_conformance
--tiered-driver NAME`` would, then prints one row per area of the suite (raw driver
contract, FileSegment, faults, stateful) with passed / failed / skipped counts.

Exit status: 0 when nothing failed, 1 when a test failed (or none ran), 2 for bad
input (unknown driver, unknown option, suite not installed). The user's own pytest
configuration is not read: the run uses an empty ini file in a scratch directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from tiered_core.spi.driver import redact

#: Row for tests outside the four areas (none today).
OTHER = "other"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "conformance", help="run the driver conformance suite against a driver",
        description="Run the conformance suite against driver NAME and print passed/failed/skipped "
                    "per area. Exit 1 on any failure.")
    parser.add_argument("name", metavar="NAME", help="driver: registered name, alias or module:Class")
    parser.add_argument("--option", "-o", metavar="KEY=VALUE", action="append", default=[],
                        help="driver option (repeatable); overrides the driver's test location")
    parser.add_argument("--capability", metavar="FIELD=VALUE[:REASON]", action="append", default=[],
                        help="override a declared capability for this run, e.g. an emulator gap")
    parser.add_argument("--hypothesis-examples", metavar="N", type=int, default=None,
                        help="examples for the stateful test (default 40)")
    parser.add_argument("-k", metavar="EXPR", dest="keyword", default=None,
                        help="only run tests matching this pytest -k expression")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per test")
    parser.set_defaults(func=run)


class ReportCollector:
    """A pytest plugin object: the area of each collected test and its final outcome."""

    def __init__(self) -> None:
        self.area: dict[str, str] = {}
        self.outcome: dict[str, str] = {}
        self.collection_errors: list[str] = []

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            cls = getattr(item, "cls", None)
            self.area[item.nodeid] = getattr(cls, "tiered_area", OTHER) if cls else OTHER

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collection_errors.append(report.nodeid or "<collection>")

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        if self.outcome.get(report.nodeid) != "failed":
            self.outcome[report.nodeid] = outcome

    def table(self) -> dict[str, dict[str, int]]:
        from tiered_conformance.areas import AREAS

        rows: dict[str, dict[str, int]] = {a: {"passed": 0, "failed": 0, "skipped": 0} for a in AREAS}
        for nodeid, outcome in self.outcome.items():
            row = rows.setdefault(self.area.get(nodeid, OTHER), {"passed": 0, "failed": 0, "skipped": 0})
            row[outcome] += 1
        return rows

    def failed(self) -> list[str]:
        return sorted(n for n, o in self.outcome.items() if o == "failed")


def format_table(rows: dict[str, dict[str, int]]) -> str:
    width = max(len("total"), *(len(a) for a in rows))
    lines = [f"{'area':<{width}}  {'passed':>6}  {'failed':>6}  {'skipped':>7}"]
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for area, row in rows.items():
        lines.append(f"{area:<{width}}  {row['passed']:>6}  {row['failed']:>6}  {row['skipped']:>7}")
        for key in total:
            total[key] += row[key]
    lines.append(f"{'total':<{width}}  {total['passed']:>6}  {total['failed']:>6}  {total['skipped']:>7}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        from tiered_conformance.options import resolve_settings
    except ImportError:
        print("tiered conformance: the suite is not installed (pip install tiered-conformance)", file=sys.stderr)
        return 2
    import pytest

    # Bad input (unknown driver or option, bad capability) is a typed error -> exit 2.
    settings = resolve_settings(args.name, args.option, args.capability, args.hypothesis_examples)
    collector = ReportCollector()
    with tempfile.TemporaryDirectory(prefix="tiered-conformance-") as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")
        argv = ["--pyargs", "tiered_conformance", "--tiered-driver", args.name,
                "-c", str(ini), "--rootdir", scratch, "-p", "no:cacheprovider",
                "--tb=short", "-rfEs", "-v" if args.verbose else "-q"]
        for item in args.option:
            argv += ["--tiered-option", item]
        for item in args.capability:
            argv += ["--tiered-capability", item]
        if args.hypothesis_examples is not None:
            argv += ["--tiered-hypothesis-examples", str(args.hypothesis_examples)]
        if args.keyword:
            argv += ["-k", args.keyword]
        code = pytest.main(argv, plugins=[collector])

    cls = settings.driver_cls
    assert cls is not None
    options = redact(settings.options, cls.secret_options)
    print()
    print(f"tiered conformance: driver {args.name!r} ({cls.__module__}.{cls.__qualname__})"
          + (f", options {options}" if options else ""))
    for o in settings.overrides:
        print(f"  capability {o.field}={o.value!r} overridden: {o.reason}")
    print(format_table(collector.table()))
    failed = collector.failed()
    for nodeid in failed:
        print(f"FAILED {nodeid}")
    for nodeid in collector.collection_errors:
        print(f"ERROR collecting {nodeid}")
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.INTERRUPTED):
        print(f"result: ERROR (pytest exit code {int(code)})")
        return 2
    ok = code == pytest.ExitCode.OK and not failed and not collector.collection_errors
    print("result: PASS" if ok else "result: FAIL")
    return 0 if ok else 1
