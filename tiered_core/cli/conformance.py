"""``tiered conformance NAME [--option k=v ...] [--capability f=v[:reason] ...]``.

Runs the conformance suite (the ``tiered-conformance`` distribution) against driver
``NAME`` in this process, exactly as ``pytest --pyargs tiered_conformance
--tiered-driver NAME`` would, then prints one row per area of the suite (raw driver
contract, FileSegment, faults, stateful) with passed / failed / skipped counts.

Exit status: 0 when nothing failed, 1 when a test failed (or none ran), 2 for bad
input (unknown driver, unknown option, suite not installed, a bad ``-k`` expression, a
location that holds a store).

The suite writes its test objects into the location ``--option`` names, so a location that
holds a store (an owner record ``.tiered-owner/`` at or below it, or in a parent location:
the location lies inside a store's tier prefix) is refused before anything runs
(:func:`refuse_a_store_location`).

The user's own pytest configuration is not read: the run uses an empty ini file in a
scratch directory. With ``--json`` pytest's own output goes to stderr and stdout holds
one JSON object (driver, per-area counts, failed tests, result).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Callable

from tiered_core.cli.shared import CheckFailed, add_json_option, int_arg, print_json
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.errors import IllegalParam, InvalidOption, InvalidPath, PluginLoadError, TieredStoreError

#: Row for tests outside the four areas (none today).
OTHER = "other"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``conformance``."""
    parser = subparsers.add_parser(
        "conformance", help="run the driver conformance suite against a driver",
        description="Run the conformance suite against driver NAME and print passed/failed/skipped "
                    "per area. Exit 1 on any failure.")
    parser.add_argument("name", metavar="NAME", help="driver: registered name, alias or module:Class")
    parser.add_argument("--option", "-o", metavar="KEY=VALUE", action="append", default=[],
                        help="driver option (repeatable); overrides the driver's test location")
    parser.add_argument("--capability", metavar="FIELD=VALUE[:REASON]", action="append", default=[],
                        help="override a declared capability for this run, e.g. an emulator gap")
    parser.add_argument("--hypothesis-examples", metavar="N", type=int_arg(1, "a number of examples"), default=None,
                        help="examples for the stateful test (default 40)")
    parser.add_argument("-k", metavar="EXPR", dest="keyword", default=None,
                        help="only run tests matching this pytest -k expression")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per test")
    add_json_option(parser, "the per-area counts, failed tests and result")
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
    """``tiered conformance``: run the suite in this process and report per area (or as JSON)."""
    try:
        from tiered_conformance.options import resolve_settings
    except ImportError:
        raise PluginLoadError("the conformance suite is not installed (pip install tiered-conformance)",
                              distribution="tiered-conformance") from None
    import pytest

    # Bad input (unknown driver or option, bad capability) is a typed error -> exit 2.
    settings = resolve_settings(args.name, args.option, args.capability, args.hypothesis_examples,
                                option_flag="--option")
    collector = ReportCollector()
    with tempfile.TemporaryDirectory(prefix="tiered-conformance-") as scratch:
        refuse_a_store_location(args.name, settings, scratch)
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
        if args.json:
            code = _run_on_stderr(lambda: pytest.main(argv, plugins=[collector]))
        else:
            code = pytest.main(argv, plugins=[collector])

    cls = settings.driver_cls
    assert cls is not None
    options = cls.redact_options(settings.options)
    failed = collector.failed()
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.INTERRUPTED):
        result = "ERROR"
    else:
        ok = code == pytest.ExitCode.OK and not failed and not collector.collection_errors
        result = "PASS" if ok else "FAIL"
    if args.json:
        report = {"driver": args.name, "class": f"{cls.__module__}.{cls.__qualname__}", "options": options,
                  "overrides": [{"field": o.field, "value": o.value, "reason": o.reason}
                                for o in settings.overrides],
                  "areas": collector.table(), "failed": failed,
                  "collection_errors": collector.collection_errors, "pytest_exit_code": int(code),
                  "result": result}
        return _finish_json(report, code)
    print()
    print(f"tiered conformance: driver {args.name!r} ({cls.__module__}.{cls.__qualname__})"
          + (f", options {options}" if options else ""))
    for o in settings.overrides:
        print(f"  capability {o.field}={o.value!r} overridden: {o.reason}")
    print(format_table(collector.table()))
    for nodeid in failed:
        print(f"FAILED {nodeid}")
    for nodeid in collector.collection_errors:
        print(f"ERROR collecting {nodeid}")
    if result == "ERROR":
        print(f"result: ERROR (pytest exit code {int(code)})")
        return int(_error_exit(code))
    print(f"result: {result}")
    return int(ExitCode.OK if result == "PASS" else ExitCode.FAILURE)


def refuse_a_store_location(name: str, settings: Any, workdir: str) -> None:
    """Refuse (:class:`InvalidPath`, exit 2, nothing written) a location given with
    ``--option`` that holds a store: an owner record (``.tiered-owner/``) anywhere at or
    below it, or directly in one of its parent locations (it lies inside a store's tier
    prefix). Looked at through the driver's ``list`` behind a read-only layer, with the
    options the suite will use (the driver's test environment, the user's options over it).
    Without ``--option`` the suite runs on the driver's own throw-away location."""
    if not settings.options:
        return
    from tiered_core.flat.ownership import OWNER_DIR
    from tiered_core.plugins import conformance_environment

    cls = settings.driver_cls
    with conformance_environment(name, workdir) as env:
        options = cls.coerce_options({**dict(env), **settings.options})
        where = {k: options[k] for k in cls.location_options if options.get(k) is not None}
        try:
            found = _owner_record(cls, options, "")
        except InvalidOption:
            raise  # a bad option is named as such
        except TieredStoreError as exc:
            raise InvalidPath(f"--option: cannot check that the conformance location {where} holds no store "
                              f"(listing it failed: {exc}); the suite writes its test objects there, so it runs "
                              "only on a location it can check", option="--option", location=where) from None
        if found is not None:
            raise _refusal(where, f"holds a store's owner record {found!r}", where)
        for parent in _parent_locations(cls, options):
            try:
                found = _owner_record(cls, parent, f"{OWNER_DIR}/")
            except TieredStoreError:
                continue  # a parent the credentials may not list (the location itself was listed)
            if found is not None:
                above = {k: parent[k] for k in cls.location_options if parent.get(k) is not None}
                raise _refusal(where, f"lies inside the tier prefix of a store (owner record {found!r} in {above})",
                               where)


def _refusal(where: dict[str, Any], what: str, location: dict[str, Any]) -> InvalidPath:
    return InvalidPath(f"--option: the conformance location {where} {what}; the suite writes (and deletes) test "
                       "objects there, which would land in the store's tier. Give an empty location of its own "
                       "(or no --option for the driver's throw-away one); nothing was written",
                       option="--option", location=location)


def _owner_record(cls: Any, options: dict[str, Any], prefix: str) -> str | None:
    """The first owner record path the driver opened with ``options`` lists under ``prefix``."""
    from tiered_core.flat.ownership import OWNER_DIR, ReadOnlyDriver

    driver = ReadOnlyDriver(cls(**options), why="tiered conformance only looks for a store before it runs")
    try:
        for path, _size in driver.list(prefix):
            if path.startswith(f"{OWNER_DIR}/") or f"/{OWNER_DIR}/" in path:
                return path
        return None
    finally:
        driver.close()


def _parent_locations(cls: Any, options: dict[str, Any]) -> list[dict[str, Any]]:
    """``options`` with the location moved to each parent of it, nearest first: a local
    ``root``'s parent directories, a ``prefix``'s parent prefixes (up to the bucket or
    container), a ``url``'s parent paths."""
    out: list[dict[str, Any]] = []
    names = cls.location_options
    root = options.get("root")
    if "root" in names and isinstance(root, str) and root:
        current = os.path.realpath(os.path.abspath(os.path.expanduser(root)))
        while os.path.dirname(current) != current:
            current = os.path.dirname(current)
            out.append({**options, "root": current})
    prefix = options.get("prefix")
    if "prefix" in names and isinstance(prefix, str):
        parts = [p for p in prefix.split("/") if p]
        out += [{**options, "prefix": "/".join(parts[:n])} for n in range(len(parts) - 1, -1, -1)]
    url = options.get("url")
    if "url" in names and isinstance(url, str) and "://" in url:
        parts = urllib.parse.urlsplit(url)
        segments = [p for p in parts.path.split("/") if p]
        lead = "/" if parts.path.startswith("/") else ""
        for n in range(len(segments) - 1, -1, -1):
            path = "/".join(segments[:n])
            path = lead + path if path or not parts.netloc else ""  # s3://bkt, file:///
            if path or parts.netloc:
                out.append({**options, "url": urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))})
    return out


def _error_exit(code: Any) -> ExitCode:
    """Exit code of a run pytest could not complete."""
    import pytest

    if code == pytest.ExitCode.INTERRUPTED:
        return ExitCode.INTERRUPTED
    return ExitCode.BAD_INPUT if code == pytest.ExitCode.USAGE_ERROR else ExitCode.FAILURE


def _finish_json(report: dict[str, Any], code: Any) -> int:
    """Print the ``--json`` report; a failed run is a :class:`CheckFailed` (the report in its context)."""
    if report["result"] == "PASS":
        print_json(report)
        return int(ExitCode.OK)
    if report["result"] == "ERROR":
        message = f"the suite could not run (pytest exit code {int(code)})"
        exit_code = _error_exit(code)
        if exit_code is ExitCode.INTERRUPTED:
            raise KeyboardInterrupt
        if exit_code is ExitCode.BAD_INPUT:
            raise IllegalParam(f"{message}: pytest rejected the arguments (e.g. -k)", report=report)
        raise CheckFailed(message, report=report)
    raise CheckFailed(f"{len(report['failed'])} conformance test(s) failed for driver {report['driver']!r}"
                      + (f", {len(report['collection_errors'])} collection error(s)"
                         if report["collection_errors"] else ""), report=report)


def _run_on_stderr(fn: Callable[[], Any]) -> Any:
    """Call ``fn`` with stdout (the file descriptor and ``sys.stdout``) sent to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            return fn()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
