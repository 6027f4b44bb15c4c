"""Typed errors across Spark: a task's :class:`~tiered_core.errors.TieredStoreError` back on
the driver as the same type, with its code, message and context.

A Python worker's exception reaches the driver program as text inside Py4J/PySpark's own
exceptions (``PythonException``, ``Py4JJavaError``, ``StreamingQueryException``,
``AnalysisException``). Code that runs inside Spark (the data source's planning and
reading, the stream source and sink, the jobs' tasks) therefore raises a
:class:`TaggedTaskError` (:func:`tagged`, :func:`tagged_iter`) whose message carries the
original error as a tag, ``TIERED_ERROR<<base64 JSON>>`` (type, code, message, context).
:func:`task_error` finds the tag in the failure's text and rebuilds the typed error; it
also recognises the plain traceback line of an untagged ``tiered_core.errors`` exception.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import re
from typing import Any, Callable, Iterator, TypeVar

from tiered_core import errors
from tiered_core.errors import DriverError, TieredStoreError
from tiered_core.spark.worker_heap import freeze_survivors

_TASK_ERROR = re.compile(r"tiered_core\.errors\.(\w+): \[\w+\] (.*)")
_TAG = re.compile(r"TIERED_ERROR<<([A-Za-z0-9+/=]+)>>")

F = TypeVar("F", bound=Callable[..., Any])


class TaggedTaskError(RuntimeError):
    """A :class:`TieredStoreError` raised inside Spark, carried as text ``error`` (its
    ``str``) followed by the tag :func:`task_error` decodes."""

    def __init__(self, error: TieredStoreError) -> None:
        self.error = error
        super().__init__(f"{error} {encode_tag(error)}")


def encode_tag(error: TieredStoreError) -> str:
    """``TIERED_ERROR<<...>>``: ``error``'s type, code, message and context (JSON, base64)."""
    code = error.code.value if isinstance(error.code, errors.ErrorCode) else str(error.code)
    record = {"type": type(error).__name__, "module": type(error).__module__, "code": code,
              "message": error.message, "context": error.context}
    text = json.dumps(record, default=str, sort_keys=True)
    return f"TIERED_ERROR<<{base64.b64encode(text.encode()).decode()}>>"


def decode_tag(text: str) -> TieredStoreError | None:
    """The typed error of the first tag in ``text``; None when there is none (or it is unreadable)."""
    match = _TAG.search(text)
    if not match:
        return None
    try:
        record = json.loads(base64.b64decode(match.group(1)))
        cls = _error_class(str(record["type"]), str(record.get("module") or ""))
        if cls is None:
            return None
        err = cls.__new__(cls)
        TieredStoreError.__init__(err, str(record["message"]), **dict(record.get("context") or {}))
        if cls.code.value != record.get("code") and record.get("code") in errors.ErrorCode.__members__:
            err.code = errors.ErrorCode(record["code"])  # an instance whose code was set at run time
        return err
    except (ValueError, TypeError, KeyError):
        return None


def _error_class(name: str, module: str) -> type[TieredStoreError] | None:
    cls = getattr(errors, name, None)
    if cls is None and module.startswith("tiered_core."):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            cls = None
    if isinstance(cls, type) and issubclass(cls, TieredStoreError):
        return cls
    return None


def tagged(fn: F) -> F:
    """Decorate code that runs inside Spark: a :class:`TieredStoreError` leaves it as a
    :class:`TaggedTaskError`."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TieredStoreError as exc:
            raise TaggedTaskError(exc) from exc
    return wrapper  # type: ignore[return-value]


def tagged_iter(iterator: Iterator[Any]) -> Iterator[Any]:
    """``iterator``'s items; a :class:`TieredStoreError` it raises leaves as a :class:`TaggedTaskError`."""
    try:
        yield from iterator
    except TieredStoreError as exc:
        raise TaggedTaskError(exc) from exc


#: The methods Spark calls on readers, stream readers and stream writers.
SPARK_METHODS = ("partitions", "read", "initialOffset", "latestOffset", "getDefaultReadLimit",
                 "prepareForTriggerAvailableNow", "reportLatestOffset", "commit", "write", "abort")


#: The methods Spark runs as tasks or planning calls in its reused Python workers, each of
#: which then pays a full garbage collection (:mod:`tiered_core.spark.worker_heap`).
TASK_METHODS = ("partitions", "read", "write")


def spark_facing(cls: type, name: str, module: str) -> type:
    """A subclass of ``cls`` (named ``name``, to be bound at module level of ``module`` so
    pickling finds it) whose :data:`SPARK_METHODS` tag :class:`TieredStoreError` s, and whose
    :data:`TASK_METHODS` first exempt what the worker holds from its later collections
    (:func:`~tiered_core.spark.worker_heap.freeze_survivors`). Spark gets this one; ``cls``
    itself keeps raising the typed errors (tests, direct use)."""
    namespace: dict[str, Any] = {"__module__": module, "__qualname__": name,
                                 "__doc__": f"{cls.__name__} as Spark calls it: typed errors leave it tagged."}
    for method in SPARK_METHODS:
        original = getattr(cls, method, None)
        if callable(original):
            if method in TASK_METHODS:
                original = _survivors_frozen(original)
            namespace[method] = _tagged_reader(original) if method == "read" else tagged(original)
    return type(name, (cls,), namespace)


def _survivors_frozen(fn: F) -> F:
    @functools.wraps(fn)
    def task(*args: Any, **kwargs: Any) -> Any:
        freeze_survivors()
        return fn(*args, **kwargs)
    return task  # type: ignore[return-value]


def _tagged_reader(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def read(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except TieredStoreError as exc:
            raise TaggedTaskError(exc) from exc
        return result if result is None else tagged_iter(result)
    return read


def _with_context(err: TieredStoreError, what: str) -> TieredStoreError:
    if what:
        err.message = f"{what}: {err.message}"
        err.args = (err.message,)
    return err


def task_error(exc: BaseException, what: str, *, fallback: bool = True) -> TieredStoreError | None:
    """The :mod:`tiered_core.errors` type a Spark task (or Spark-run planning code) raised,
    found in the job failure's text, with ``what`` before its message and its context kept.

    When none is named: a retryable :class:`DriverError` with the failure's first line
    (``fallback=True``), or None (``fallback=False``: the caller re-raises the original).
    """
    if isinstance(exc, TaggedTaskError):
        return _with_context(exc.error, what)
    if isinstance(exc, TieredStoreError):
        return exc
    text = str(exc)
    tagged_error = decode_tag(text)
    if tagged_error is not None:
        return _with_context(tagged_error, what)
    match = _TASK_ERROR.search(text)
    if match:
        cls = _error_class(match.group(1), "")
        if cls is not None:
            err = cls.__new__(cls)
            TieredStoreError.__init__(err, f"{what}: {match.group(2).strip()}" if what else match.group(2).strip())
            if isinstance(err, DriverError):
                err.retryable = True
            return err
    if not fallback:
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    cause = _root_cause(text)
    shown = first[:500] + (f" (cause: {cause[:500]})" if cause and cause not in first else "")
    return DriverError(f"{what}: {shown}" if what else shown, retryable=True)


_CAUSED_BY = re.compile(r"Caused by: ([\w.$]+(?:Exception|Error)\b[^\n]*)")
_JAVA_ERROR = re.compile(r"^[\s:]*((?:java|org|scala|py4j)\.[\w.$]+(?:Exception|Error)\b[^\n]*)", re.M)


def _root_cause(text: str) -> str | None:
    """The innermost cause a JVM failure's text names (its last ``Caused by:``), else its
    first Java exception line: "An error occurred while calling o257.javaToPython" says
    nothing, "java.io.IOException: No space left on device" does."""
    causes = _CAUSED_BY.findall(text)
    if causes:
        return causes[-1].strip()
    found = _JAVA_ERROR.search(text)
    return found.group(1).strip() if found else None


__all__ = ["SPARK_METHODS", "TASK_METHODS", "TaggedTaskError", "decode_tag", "encode_tag", "spark_facing", "tagged",
           "tagged_iter", "task_error"]
