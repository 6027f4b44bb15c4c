"""What every ``tiered`` subcommand shares: ``--json``, errors as output, opening a store.

- :func:`add_json_option` gives a subcommand its ``--json`` flag; :func:`int_arg` makes the
  type of an integer option whose error names the option, the value and what it accepts.
- :func:`error_payload` turns an exception into the ``{"error": {...}}`` object printed
  with ``--json`` (code, exit code, message and the error's context, secrets redacted).
- :func:`check_store_path`, :func:`store_exists` and :func:`open_store` open a store the
  way an operator expects: an unusable ``store_path`` is a :class:`ConfigError` naming it,
  and read-only commands never create an empty store (:class:`StoreNotFound`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
import warnings
from typing import IO, TYPE_CHECKING, Any, Callable

from tiered_core.access.paths import check_store_path
from tiered_core.cli.exit_codes import exit_code_for
from tiered_core.errors import ErrorCode, NotFound, TieredStoreError

if TYPE_CHECKING:
    from tiered_core.access.tiered_store import TieredMessageStore
    from tiered_core.config import StoreConfig

#: Error codes of failures that are not a :class:`TieredStoreError`.
USAGE = "USAGE"  # the command line itself is wrong (argparse)
CHECK_FAILED = "CHECK_FAILED"  # the command ran a check and it failed (conformance, demo)
INTERNAL = "INTERNAL"  # an unexpected exception (a bug)
INTERRUPTED = "INTERRUPTED"  # Ctrl-C (SIGINT)

#: Context keys never printed with their value (in addition to each driver's secret_options).
_SECRET_KEY = re.compile(r"(password|passwd|secret|token|credential|connection_string|account_key|sas|"
                         r"private_key|api_key)", re.I)
REDACTED = "***"


# -- errors of the command line ---------------------------------------------------------------

class StoreNotFound(NotFound):
    """A read-only command named a store that does not exist (it is not created)."""

    def __init__(self, config: "StoreConfig", hint: str | None = None) -> None:
        path, metadata = config.store_path, config.effective_metadata_path()
        if not os.path.isdir(path):
            state, default_hint = "does not exist", "`tiered put` creates a store"
        elif not os.listdir(path):
            state, default_hint = "is empty", "`tiered put` creates a store"
        else:
            state = f"holds no local store and no metadata {metadata!r}"
            default_hint = "if the tiered backend still holds its data, run `tiered metadata rebuild --config FILE`"
        if hint is None and (not os.path.isdir(path) or not os.listdir(path)):
            hint = _tier_owner_hint(config)
        hint = hint or default_hint
        # NotFound's constructor phrases "'path' detail"; this message says more.
        TieredStoreError.__init__(self, f"no tiered store at store_path {path!r}{_where(config)}: "
                                        f"the directory {state}; {hint}",
                                  path=path, key="store_path", source=config.source, metadata_path=metadata)


def _tier_owner_hint(config: "StoreConfig") -> str | None:
    """For a ``store_path`` that holds nothing: when the configured tier prefix holds a
    store's owner record (a lost disk, a failover to a new path), the command that takes it
    over; when it cannot be read (bad credentials), why; None when it holds none. Reads only (opening a driver creates
    nothing; the owner record is read through a driver that refuses writes)."""
    from tiered_core.access.opening import prefix_owner
    from tiered_core.flat.ownership import tier_prefix

    try:
        owner = prefix_owner(config)
    except TieredStoreError as exc:
        # e.g. access denied: say so, since the store may well be there (driver errors
        # never quote a credential)
        return (f"its tier prefix {tier_prefix(config.cluster, config.broker)!r} could not be read to tell whether "
                f"it holds this store's data (a lost disk): {exc}; fix that first (when the prefix holds no store, "
                "`tiered put` creates one)")
    except OSError:
        return None
    if owner is None:
        return None
    return (f"its tier prefix {tier_prefix(config.cluster, config.broker)!r} holds the data of {owner.describe()}: "
            "if this machine lost its disk, or this is a failover to a new store_path, stop the old store and run "
            f"`tiered takeover --config {config.source or 'FILE'} --create` (it rebuilds the metadata from the tier "
            "and continues every queue after it); a new store needs its own broker name")


class MessageNotFound(TieredStoreError, LookupError):
    """``tiered get`` found no message; ``context`` says where it looked and what the store answered."""

    code = ErrorCode.NOT_FOUND


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (code ``INTERRUPTED``, exit 130) after the command did something its caller must
    know, e.g. a put that stored its message: ``message`` and ``context`` say what (they go
    into the error document, as a typed error's do)."""

    code = INTERRUPTED

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context


class CheckFailed(TieredStoreError):
    """A check the command ran failed (the conformance suite, the demo's verification)."""

    code = ErrorCode.UNKNOWN

    def __str__(self) -> str:
        return f"[{CHECK_FAILED}] {self.message}"


class DispatchFailed(TieredStoreError):
    """A dispatch round left messages untiered; ``queues`` names them, ``errors`` says why.

    The code is the first :class:`ErrorCode` named in the errors (e.g. ``CORRUPT_DATA``),
    else ``DRIVER_ERROR`` (a commit to the backend failed).
    """

    code = ErrorCode.DRIVER_ERROR

    def __init__(self, message: str, *, errors: list[str], **context: Any) -> None:
        super().__init__(message, errors=errors, **context)
        for error in errors:
            found = re.search(r"\[([A-Z_]+)\]", error)
            if found and found.group(1) in ErrorCode.__members__:
                self.code = ErrorCode(found.group(1))
                break


# -- option types ----------------------------------------------------------------------------

def int_arg(minimum: int, what: str, maximum: int | None = None) -> Callable[[str], int]:
    """The argparse ``type`` of an integer option: ``what`` it is (e.g. "a queue id") and its
    bounds. A bad value reads ``argument --queue: must be a queue id: an integer from 0 to
    2147483647, got 'abc'`` (argparse names the option), never argparse's ``invalid
    _non_negative value``."""
    accepted = f"an integer from {minimum} to {maximum}" if maximum is not None else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}: {accepted}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}: {accepted}, got {value}")
        return value

    parse.__name__ = what  # (argparse's own messages name the type by it)
    return parse


# -- --json ----------------------------------------------------------------------------------

def add_json_option(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """Give ``parser`` the ``--json`` flag every subcommand has."""
    parser.add_argument("--json", action="store_true",
                        help=f"print {what} as JSON on stdout; on failure print {{\"error\": {{...}}}} "
                             "there instead (the exit status tells which)")


def topics_arg(values: list[str] | None) -> list[str] | None:
    """The topics of a ``--topics`` option (names separated by spaces or commas), each
    checked (:class:`~tiered_core.errors.IllegalParam` naming a bad one, exit 2, before
    anything is read); None when the option was not given."""
    from tiered_core.codec.naming import validate_topic

    if values is None:
        return None
    topics = [t for item in values for t in item.split(",") if t]
    for topic in topics:
        validate_topic(topic)
    return topics


def print_section(out: IO[str], title: str, items: list[tuple[str, list[str]]]) -> None:
    """A report section: ``TITLE (n)``, then each item's head line and its detail lines
    beneath it (nothing when there are no items)."""
    if not items:
        return
    print(f"{title} ({len(items)})", file=out)
    for head, lines in items:
        print(f"  {head}", file=out)
        for line in lines:
            print(f"    {line}", file=out)


#: Whether :func:`print_json` began writing a document to stdout in this run (``main``
#: then adds no error document after it: stdout holds one).
_json_on_stdout = False


def reset_json_on_stdout() -> None:
    """Forget earlier documents (``main`` calls it first: tests run several commands in one process)."""
    global _json_on_stdout
    _json_on_stdout = False


def json_on_stdout() -> bool:
    """Whether a JSON document was written to stdout since :func:`reset_json_on_stdout`."""
    return _json_on_stdout


def print_json(obj: Any, stream: IO[str] | None = None, *, last: bool = False) -> None:
    """Print ``obj`` as one indented JSON document (non-JSON values as strings).

    The whole text is built first and written in one write, then flushed; a Ctrl-C while it
    is written is held back until it is out (never a cut document), then raised, or dropped
    with ``last`` (the error document, the run's last output).
    """
    text = json.dumps(obj, indent=2, default=_jsonable) + "\n"
    stream = stream or sys.stdout
    if _write_whole(stream, text) and not last:
        raise KeyboardInterrupt


#: The hooks ``logging`` runs around every fork of this process (``os.register_at_fork``: a
#: subprocess started, Spark's JVM launched). An exception raised in one is printed as
#: "Exception ignored in ..." with a traceback, and is then lost.
_LOGGING_AT_FORK_HOOKS = frozenset({"_acquireLock", "_releaseLock", "_after_at_fork_child_reinit_locks"})

#: How long a Ctrl-C that came during a fork hook waits before it is raised: the hook's
#: lock release takes microseconds.
_INTERRUPT_AGAIN_S = 0.05


def interrupt(signum: int, frame: Any) -> None:
    """The ``tiered`` command's SIGINT handler: ``KeyboardInterrupt``, as Python's default
    handler raises it, except inside ``logging``'s at-fork hooks (:data:`_LOGGING_AT_FORK_HOOKS`),
    where Python would print the exception as ignored, with a traceback, and the Ctrl-C would be
    lost (a drill's Ctrl-C while Spark's JVM was launched: the export went on): there the signal
    is sent again a moment later, when this process is back in its own code."""
    code = getattr(frame, "f_code", None)
    if code is not None and code.co_name in _LOGGING_AT_FORK_HOOKS \
            and getattr(frame, "f_globals", {}).get("__name__") == "logging":
        again = threading.Timer(_INTERRUPT_AGAIN_S, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    raise KeyboardInterrupt


def raises_on_interrupt(handler: Any) -> bool:
    """Whether ``handler`` (a SIGINT handler) raises ``KeyboardInterrupt``: Python's default or
    :func:`interrupt`, not a command's own."""
    return handler is signal.default_int_handler or handler is interrupt


def _write_whole(stream: IO[str], text: str) -> bool:
    """Write ``text`` to ``stream`` and flush it with SIGINT held back; whether one came meanwhile."""
    global _json_on_stdout
    held: list[int] = []
    swap = (threading.current_thread() is threading.main_thread()
            and raises_on_interrupt(signal.getsignal(signal.SIGINT)))  # not a command's own handler
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if swap else None
    try:
        if stream is sys.stdout:
            _json_on_stdout = True
        buffer = getattr(stream, "buffer", None)
        if buffer is None:
            stream.write(text)
        else:
            # A signal handler run mid-write cuts a buffered write short (it returns the count
            # written) and TextIOWrapper.write then drops the rest: write the bytes until all are out.
            stream.flush()
            data = memoryview(text.encode(stream.encoding or "utf-8"))
            done = 0
            while done < len(data):
                done += buffer.write(data[done:])
            stream = buffer
        stream.flush()
    finally:
        if swap:
            signal.signal(signal.SIGINT, previous)
    return bool(held)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "value") and hasattr(value, "name"):  # an enum member
        return value.value if isinstance(value.value, (str, int)) else value.name
    return str(value)


def _secret_names() -> set[str]:
    """Every installed driver's ``secret_options`` (best effort: none when plugins fail)."""
    logger = logging.getLogger("tiered_core.plugins")
    disabled, logger.disabled = logger.disabled, True  # a broken plugin was reported already
    try:
        from tiered_core.plugins import Registry

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {name for info in Registry().load().drivers.values()
                    for name in getattr(info.cls, "secret_options", ())}
    except Exception:  # noqa: BLE001 - redaction by pattern still applies
        return set()
    finally:
        logger.disabled = disabled


def redact_context(value: Any, secrets: set[str] | None = None) -> Any:
    """``value`` with every mapping entry whose key names a secret replaced by ``***``."""
    if secrets is None:
        secrets = _secret_names()
    if isinstance(value, dict):
        return {str(k): REDACTED if (str(k) in secrets or _SECRET_KEY.search(str(k)))
                else redact_context(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact_context(v, secrets) for v in value]
    return value


def error_payload(exc: BaseException, *, code: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """The ``{"error": {...}}`` object for ``exc``.

    Holds ``code`` (an :class:`ErrorCode` value, or ``USAGE`` / ``CHECK_FAILED`` /
    ``INTERRUPTED`` / ``INTERNAL``), ``exit_code``, ``type`` (the exception class),
    ``message`` and the error's context (the offending input), with secrets redacted.
    """
    if isinstance(exc, CheckFailed):
        code = code or CHECK_FAILED
    if isinstance(exc, KeyboardInterrupt):
        code, message = code or INTERRUPTED, getattr(exc, "message", "interrupted")
        # (secrets by name pattern only: no plugin loading after a Ctrl-C)
        context = redact_context(getattr(exc, "context", {}), set())
    elif isinstance(exc, TieredStoreError):
        code = code or (exc.code.value if isinstance(exc.code, ErrorCode) else str(exc.code))
        message = exc.message
        # Top-level fields are the error's own (a message key, a config key, a path): only a
        # field named like a secret is hidden. Inside nested mappings (driver options), a name
        # any driver declares secret is hidden too (the s3 driver's option ``key``).
        secrets = _secret_names()
        context = {str(k): REDACTED if _SECRET_KEY.search(str(k)) else redact_context(v, secrets)
                   for k, v in exc.context.items()}
    else:
        code = code or INTERNAL
        message = str(exc) or type(exc).__name__
        context = {}
        if isinstance(exc, OSError):
            context = {"errno": exc.errno, "filename": exc.filename}
    error: dict[str, Any] = {
        "code": code,
        "exit_code": int(exit_code if exit_code is not None else exit_code_for(exc)),
        "type": type(exc).__name__,
        "message": message,
    }
    for key, value in context.items():
        error.setdefault(key, value)
    return {"error": error}


# -- opening a store ---------------------------------------------------------------------------

def _where(config: "StoreConfig") -> str:
    return f" (config {config.source!r})" if config.source else ""


def store_exists(config: "StoreConfig") -> bool:
    """True when ``config`` names an existing store: ``store_path`` holds a local store (its
    commit-log directory or checkpoint) or the store's identity file, or the metadata file
    exists. (Whether what exists is consistent is the store's to decide when it opens.)"""
    from tiered_core.flat.ownership import STORE_ID_FILE
    from tiered_core.local.local_store import CHECKPOINT_FILE

    marks = (os.path.isdir(os.path.join(config.store_path, "commitlog")),
             os.path.isfile(os.path.join(config.store_path, CHECKPOINT_FILE)),
             os.path.isfile(os.path.join(config.store_path, STORE_ID_FILE)))
    return any(marks) or os.path.exists(config.effective_metadata_path())


def load_config(path: str) -> "StoreConfig":
    """``StoreConfig.load(path)`` (a :class:`ConfigError` names what is wrong), refused when its
    tier would not outlive the command (:func:`require_lasting_tier`)."""
    from tiered_core.config import StoreConfig

    config = StoreConfig.load(path)
    require_lasting_tier(config)
    return config


def require_lasting_tier(config: "StoreConfig") -> None:
    """Raise :class:`ConfigError` when ``config``'s driver keeps its objects inside one process
    (the memory driver, fsspec on ``memory://``): each ``tiered`` command is a process of its
    own, so what one tiered would be gone before the next one reads it."""
    from tiered_core.errors import ConfigError
    from tiered_core.plugins import driver_class

    cls, options = driver_class(config.driver), config.effective_driver_options()
    if cls.outlives_process(options):
        return
    where = config.source or "config"
    _backend, location = cls.location(options)  # never a secret
    shown = "".join(f", {key} {value!r}" for key, value in location.items() if value)
    raise ConfigError(f"{where}: driver {config.driver!r}{shown} keeps the tier inside one process, and every `tiered` "
                      "command is a process of its own: what one command tiers would be gone when it exits. Use a "
                      "backend that outlives the process (posix, s3, gcs, azure, or fsspec on file:// or an object "
                      "store); an in-memory tier is for tests and programs that open the store themselves",
                      key="driver", source=config.source, value=config.driver)


def open_store(config: "StoreConfig", *, create: bool) -> "TieredMessageStore":
    """Open the store ``config`` names, after :func:`check_store_path`.

    With ``create=False`` (read-only commands) a store that does not exist raises
    :class:`StoreNotFound` instead of being created empty, and an existing one is opened
    read-only (``TieredMessageStore.open(config, read_only=True)``): nothing is written to
    its tier or its metadata.
    """
    from tiered_core.access.tiered_store import TieredMessageStore

    check_store_path(config)
    if not create and not store_exists(config):
        raise StoreNotFound(config)
    return TieredMessageStore.open(config, read_only=not create)


__all__ = ["StoreNotFound", "MessageNotFound", "require_lasting_tier", "Interrupted", "CheckFailed", "DispatchFailed", "add_json_option",
           "int_arg", "print_json", "json_on_stdout", "reset_json_on_stdout", "redact_context", "error_payload",
           "check_store_path", "store_exists", "load_config", "open_store", "USAGE", "CHECK_FAILED", "INTERRUPTED",
           "INTERNAL"]
