"""The ``tiered`` command.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (returning the
exit code). Add a module name to ``COMMANDS`` to add a subcommand.

Exit status (:mod:`tiered_core.cli.exit_codes`): 0 only for success; a typed error maps
to a code by its :class:`~tiered_core.errors.ErrorCode`. Errors go to stderr as one line
``tiered CMD: [CODE] message``; with ``--json`` stdout additionally holds exactly one JSON
document: the result, or ``{"error": {"code", "exit_code", "type", "message", ...context}}``.
Ctrl-C prints ``interrupted`` (code ``INTERRUPTED``, exit 130), no traceback, from the moment
``main`` runs (building the parser included); one while a JSON document is written is held
until it is out, and no error document follows it. A local disk
failure is ``LOCAL_IO`` (exit 5) naming the file; SIGXFSZ is ignored so that a write past
``ulimit -f`` fails with that error instead of killing the process.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame) -> None:  # noqa: ARG001 - a signal handler's shape
    """Ctrl-C while the ``tiered`` command imports its modules, before :func:`main` runs: the
    same line, JSON document and exit status 130 as later, instead of an import traceback."""
    os.write(2, b"tiered: interrupted\n")
    if "--json" in sys.argv[1:]:
        os.write(1, b'{"error": {"code": "INTERRUPTED", "exit_code": 130, "type": "KeyboardInterrupt", '
                    b'"message": "interrupted"}}\n')
    os._exit(130)


# Set before anything heavy is imported, and only when this runs as the `tiered` command
# (its console script): a program that imports this module keeps its own Ctrl-C.
if os.path.basename(sys.argv[0] if sys.argv else "") == "tiered":
    try:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread: only that one may set a handler
        pass

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import traceback  # noqa: E402
from typing import NoReturn  # noqa: E402

from tiered_core import __version__
from tiered_core.cli.shared import (
    USAGE, error_payload, interrupt, json_on_stdout, print_json, reset_json_on_stdout,
)
from tiered_core.cli.exit_codes import ExitCode, exit_code_for, table
from tiered_core.errors import LocalIOError, TieredStoreError

#: Subcommand modules, in the order ``tiered --help`` lists them.
COMMANDS = [
    "drivers",
    "conformance",
    "demo",
    "ops",
    "metadata_commands",
    "takeover",
    "verify_commands",
    "repair_commands",
    "spark",
    "static_topic_commands",
]


def _in_main_thread() -> bool:
    """Whether this is the main thread (the only one that may set signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


class UsageError(Exception):
    """The command line is wrong (what argparse reports); ``usage`` is the parser's usage text."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(message)
        self.usage = usage
        self.prog = prog


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error raises :class:`UsageError` so ``main`` reports it
    (as JSON with ``--json``) with exit status ``BAD_INPUT``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage(), self.prog)


def build_parser() -> argparse.ArgumentParser:
    """The ``tiered`` parser with every installed subcommand."""
    parser = ArgumentParser(
        prog="tiered", description="tiered-store: tiered message storage",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status:\n" + table() + "\n\nWith --json, stdout holds one JSON document: the result, "
               "or {\"error\": {...}} on failure.")
    parser.add_argument("--version", action="version", version=f"tiered {__version__}",
                        help="print the version of tiered-core and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tiered_core.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tiered_core.cli.{name}":
                continue  # not written yet
            raise
        module.register(sub)
    return parser


def command_name(args: argparse.Namespace | None) -> str:
    """``tiered put``, ``tiered metadata rebuild``...: how messages name the command."""
    if args is None or not getattr(args, "command", None):
        return "tiered"
    parts = ["tiered", args.command]
    for nested in ("metadata_action", "job", "static_action"):
        if getattr(args, nested, None):
            parts.append(getattr(args, nested))
    return " ".join(parts)


def _fail(exc: BaseException, args: argparse.Namespace | None, want_json: bool) -> int:
    """Report ``exc`` (stderr; and stdout as JSON with ``--json``) and return its exit code.

    No error document follows a document already on stdout (a Ctrl-C after the result was
    written): stdout holds one.
    """
    if isinstance(exc, OSError):
        # (imported here: tiered_core.local is heavy, and imports before main's try cannot report a Ctrl-C)
        from tiered_core.local.io_errors import DISK_ERRNOS, local_io_error

        if exc.errno in DISK_ERRNOS:
            # a local disk failure that escaped untyped: still LOCAL_IO (exit 5), naming the file
            exc = local_io_error("accessing", exc.filename, exc)
    code = exit_code_for(exc)
    name = command_name(args)
    if isinstance(exc, KeyboardInterrupt):
        print(f"{name}: {getattr(exc, 'message', 'interrupted')}", file=sys.stderr)
    elif isinstance(exc, TieredStoreError):
        print(f"{name}: {exc}", file=sys.stderr)
    elif isinstance(exc, OSError):
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    else:
        print(f"{name}: unexpected error (a bug; please report it with this traceback):", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
    if want_json and not json_on_stdout():
        print_json(error_payload(exc, exit_code=code), last=True)
    return int(code)


class _CommandLogFormat(logging.Formatter):
    """How the ``tiered`` command prints log records on stderr: this project's own as their
    message (as Python's default handler did), another package's -- gcsfs logs every request
    it gives up on with its traceback -- on one line naming its logger and the exception's
    type: the command reports the failure itself, typed, on its own line."""

    _OWN = ("tiered_core", "tiered_driver_", "tiered_conformance")

    def format(self, record: logging.LogRecord) -> str:
        if record.name.startswith(self._OWN):
            return super().format(record)
        text = f"{record.name}: {record.getMessage()}"
        exc = record.exc_info[1] if record.exc_info else None
        return f"{text} ({type(exc).__name__})" if exc is not None and type(exc).__name__ not in text else text


def _log_to_stderr() -> None:
    """The ``tiered`` command's log handler (WARNING and up, :class:`_CommandLogFormat`), unless
    logging is configured already."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(_CommandLogFormat("%(message)s"))
        root.addHandler(handler)


class _OutputSink(io.RawIOBase):
    """Standard output's (or error's) file descriptor, written until a write fails: its
    reader went away (``| head``, ``| true``) or its file cannot take more (a full disk).
    From then on what the command prints there is dropped, so the command still finishes
    and exits with its own status (a verify that found damage must not say 0); ``failed``
    keeps the error of a failure other than a reader gone, which ``main`` reports."""

    def __init__(self, fd: int, name: str) -> None:
        super().__init__()
        self.fd, self.name = fd, name
        self.dropping = False
        self.failed: OSError | None = None

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:  # type: ignore[override]
        if not self.dropping:
            try:
                return os.write(self.fd, data)
            except BrokenPipeError:
                self.dropping = True
            except OSError as exc:
                self.dropping, self.failed = True, exc
        return len(memoryview(data))


#: The sinks under ``sys.stdout`` and ``sys.stderr`` of the ``tiered`` command.
_SINKS: list[_OutputSink] = []


def _outputs_outliving_their_readers() -> None:
    """Put an :class:`_OutputSink` under ``sys.stdout`` and ``sys.stderr`` (the ``tiered``
    command only: a program calling ``main`` keeps its own streams)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        with contextlib.suppress(OSError):
            stream.flush()
        sink = _OutputSink(fd, name)
        _SINKS.append(sink)
        setattr(sys, name, io.TextIOWrapper(io.BufferedWriter(sink), encoding=stream.encoding, errors=stream.errors,
                                            line_buffering=stream.line_buffering or name == "stderr",
                                            write_through=name == "stderr"))


def _output_lost(code: int) -> int:
    """``code``, or LOCAL_IO's exit status when the command succeeded but its output could
    not be written (not a reader gone: a full disk, an I/O error), said on stderr if it can."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    failed = next((s for s in _SINKS if s.failed is not None and s.name == "stdout"), None)
    if failed is None or code != 0:
        return code
    with contextlib.suppress(OSError, ValueError):
        print(f"tiered: [LOCAL_IO] the output could not be written to standard output: "
              f"{failed.failed.strerror or failed.failed}", file=sys.stderr)
    return int(exit_code_for(LocalIOError("standard output could not be written", path="stdout")))


def main(argv: list[str] | None = None) -> int:
    """Run ``tiered`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    command = _in_main_thread() and signal.getsignal(signal.SIGINT) is _interrupted_while_starting
    if command:
        signal.signal(signal.SIGINT, interrupt)  # from here on a Ctrl-C is reported below
        _outputs_outliving_their_readers()
        _log_to_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    reset_json_on_stdout()
    parsed: list[argparse.Namespace] = []  # the parsed command line, once there is one
    try:
        return _output_lost(_run(argv, parsed)) if command else _run(argv, parsed)
    except KeyboardInterrupt as exc:  # anywhere: building the parser (imports), the command, reporting its error
        args = parsed[0] if parsed else None
        want_json = bool(getattr(args, "json", False)) if args is not None else "--json" in argv
        try:
            return _fail(exc, args, want_json)
        except KeyboardInterrupt:  # a second Ctrl-C while the first is reported
            return int(ExitCode.INTERRUPTED)
    finally:
        if command:  # the `tiered` command exits next: a Ctrl-C now would only turn its status into death by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run(argv: list[str], parsed: list[argparse.Namespace]) -> int:
    """``main`` but for Ctrl-C, which ``main`` reports; appends the parsed arguments to ``parsed``."""
    want_json = "--json" in argv
    if hasattr(signal, "SIGXFSZ") and _in_main_thread():
        # A write past the file size limit (ulimit -f) must fail with EFBIG, which the store
        # reports as a LOCAL_IO error naming the file, not kill the process (the default).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(exc.usage)
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        if want_json:
            print_json(error_payload(exc, code=USAGE, exit_code=ExitCode.BAD_INPUT), last=True)
        return int(ExitCode.BAD_INPUT)
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else int(ExitCode.BAD_INPUT)
    parsed.append(args)
    want_json = bool(getattr(args, "json", False))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # noqa: BLE001 - every failure gets its exit code (Ctrl-C: main)
        return _fail(exc, args, want_json)


if __name__ == "__main__":
    sys.exit(main())
