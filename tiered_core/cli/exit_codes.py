"""Exit status of the ``tiered`` command, defined once.

0 means the command did what was asked; every failure maps to one of a few non-zero
codes so that a script can branch on the kind of failure without parsing text:

====  ===========  ==========================================================================
code  name         when
====  ===========  ==========================================================================
0     OK           success
1     FAILURE      anything else: a check the command ran failed (conformance tests, the demo's
                   verification) or an unexpected error (a bug: the traceback is printed)
2     BAD_INPUT    bad input: command-line usage, config file or value, driver option, parameter,
                   unknown driver, a plugin that fails to load in strict mode
3     NOT_FOUND    what was asked for does not exist: the store, a message at an offset, a key
4     CORRUPT      stored bytes fail validation (``CORRUPT_DATA``)
5     BACKEND      the backend or the store's state failed: driver errors, state conflicts,
                   metadata failures, a dispatch that did not complete, objects the metadata
                   does not know, a tier prefix owned by another store, a fenced writer
130   INTERRUPTED  interrupted (Ctrl-C)
====  ===========  ==========================================================================

:func:`exit_code_for` maps an exception to its code: first by its
:class:`~tiered_core.errors.ErrorCode` (:data:`BY_ERROR_CODE`), then by the codes of its
base classes (a new error class derived from ``StateConflict`` gets ``BACKEND``), and an
error code this table does not know yet falls back to ``BACKEND``.
"""

from __future__ import annotations

import enum

from tiered_core.errors import ErrorCode, TieredStoreError


class ExitCode(enum.IntEnum):
    """Exit status of ``tiered``; values are part of the command's interface."""

    OK = 0
    FAILURE = 1
    BAD_INPUT = 2
    NOT_FOUND = 3
    CORRUPT = 4
    BACKEND = 5
    INTERRUPTED = 130


#: Explicit mapping of every error code known when this table was written.
BY_ERROR_CODE: dict[ErrorCode, ExitCode] = {
    ErrorCode.ILLEGAL_PARAM: ExitCode.BAD_INPUT,
    ErrorCode.INVALID_PATH: ExitCode.BAD_INPUT,
    ErrorCode.INVALID_OPTION: ExitCode.BAD_INPUT,
    ErrorCode.UNKNOWN_DRIVER: ExitCode.BAD_INPUT,
    ErrorCode.CONFIG: ExitCode.BAD_INPUT,
    ErrorCode.PLUGIN_LOAD: ExitCode.BAD_INPUT,
    ErrorCode.NOT_FOUND: ExitCode.NOT_FOUND,
    ErrorCode.ILLEGAL_OFFSET: ExitCode.NOT_FOUND,
    ErrorCode.CORRUPT_DATA: ExitCode.CORRUPT,
    ErrorCode.DRIVER_ERROR: ExitCode.BACKEND,
    ErrorCode.STATE_CONFLICT: ExitCode.BACKEND,
    ErrorCode.POSITION_MISMATCH: ExitCode.BACKEND,
    ErrorCode.SEGMENT_SEALED: ExitCode.BACKEND,
    ErrorCode.SEGMENT_CLOSED: ExitCode.BACKEND,
    ErrorCode.METADATA: ExitCode.BACKEND,
    ErrorCode.UNKNOWN_OBJECTS: ExitCode.BACKEND,
    ErrorCode.PREFIX_OWNED: ExitCode.BACKEND,
    ErrorCode.FENCED: ExitCode.BACKEND,
    ErrorCode.MAPPING: ExitCode.BAD_INPUT,
    ErrorCode.OFFSET_CONFLICT: ExitCode.BACKEND,
    ErrorCode.IDENTITY_MISMATCH: ExitCode.BAD_INPUT,
    ErrorCode.LOCAL_IO: ExitCode.BACKEND,
    ErrorCode.UNKNOWN: ExitCode.FAILURE,
}

#: The code of an :class:`ErrorCode` this table does not know (new codes are about
#: backend or store state: ownership, fencing, unknown backend objects).
DEFAULT_FOR_UNKNOWN_CODE = ExitCode.BACKEND

#: One line per exit code, for ``tiered --help`` and the README.
DESCRIPTIONS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILURE: "a check failed (conformance, demo verification) or an unexpected error",
    ExitCode.BAD_INPUT: "bad input: usage, config, option, parameter, unknown driver, broken plugin",
    ExitCode.NOT_FOUND: "not found: the store, a message, a key",
    ExitCode.CORRUPT: "corrupt data: stored bytes fail validation",
    ExitCode.BACKEND: "backend or store state failed: driver, metadata, conflict, dispatch, ownership",
    ExitCode.INTERRUPTED: "interrupted",
}


def exit_code_for_error_code(code: ErrorCode | str) -> ExitCode:
    """The exit code of one error code (``BACKEND`` for a code not in :data:`BY_ERROR_CODE`)."""
    try:
        code = ErrorCode(code)
    except ValueError:
        return DEFAULT_FOR_UNKNOWN_CODE
    return BY_ERROR_CODE.get(code, DEFAULT_FOR_UNKNOWN_CODE)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code for ``exc``.

    A :class:`~tiered_core.errors.TieredStoreError` maps by its ``code``; when that code is
    not in :data:`BY_ERROR_CODE`, by the first base class whose code is, else ``BACKEND``.
    ``KeyboardInterrupt`` is ``INTERRUPTED``; any other exception is ``FAILURE``.
    """
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if not isinstance(exc, TieredStoreError):
        return ExitCode.FAILURE
    own = getattr(exc, "code", None)
    try:
        if ErrorCode(own) in BY_ERROR_CODE:
            return BY_ERROR_CODE[ErrorCode(own)]
    except ValueError:
        pass
    # A code this table does not know: the nearest base class with a known code decides
    # (TieredStoreError's own UNKNOWN does not count: that would make new codes "anything else").
    for klass in type(exc).__mro__[1:]:
        if klass is TieredStoreError or not issubclass(klass, TieredStoreError) or "code" not in klass.__dict__:
            continue
        try:
            base = ErrorCode(klass.__dict__["code"])
        except ValueError:
            continue
        if base in BY_ERROR_CODE:
            return BY_ERROR_CODE[base]
    return DEFAULT_FOR_UNKNOWN_CODE


def table() -> str:
    """The exit codes as aligned text lines (``code  NAME  meaning``)."""
    return "\n".join(f"{int(c):>3}  {c.name:<11}  {DESCRIPTIONS[c]}" for c in ExitCode)


__all__ = ["ExitCode", "BY_ERROR_CODE", "DEFAULT_FOR_UNKNOWN_CODE", "DESCRIPTIONS",
           "exit_code_for", "exit_code_for_error_code", "table"]
