"""Local disk failures as typed errors: :class:`~tiered_core.errors.LocalIOError`.

A full disk (ENOSPC, EDQUOT), a file past the size limit (EFBIG; ``ulimit -f``), a read-only
or forbidden file (EROFS, EACCES, EPERM) or a failing device (EIO) anywhere in the local
store -- commit log, consume queues, key index, checkpoint -- is raised as a
``LocalIOError`` naming the file, the errno and what it means, never as a bare ``OSError``.

For a put the error also says whether the message was stored (``stored``): the local store
decides it by where the failure came (the commit-log append: not stored; after it: stored),
and :func:`with_stored` writes it into the error and its message, so a producer knows
whether to send it again.
"""

from __future__ import annotations

import errno
from typing import Any

from tiered_core.errors import LocalIOError

#: The errnos after which the same call may succeed later (space freed, call repeated).
_RETRYABLE_ERRNOS = {errno.ENOSPC, errno.EINTR, errno.EAGAIN, errno.EDQUOT}
#: What an operator should know about the usual local disk failures.
_DISK_HINTS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file would exceed the largest file allowed (ulimit -f, or the file system's limit)",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "no permission",
    errno.EPERM: "no permission",
    errno.EIO: "the device failed",
    errno.EMFILE: "too many open files (ulimit -n)",
}


#: The errnos of a failing local disk (rather than of a bug): what a bare OSError that
#: escaped is reported as a LocalIOError for.
DISK_ERRNOS = frozenset(_DISK_HINTS) - {errno.EMFILE}


def local_io_error(what: str, path: str | None, exc: OSError, *, stored: bool | None = None) -> LocalIOError:
    """``exc`` (raised while ``what`` ``path``: "writing", "fsync of"...) as a LocalIOError
    naming the file, the errno and what it means; ``retryable`` for ENOSPC and the like.

    ``stored`` is for a put (see :class:`~tiered_core.errors.LocalIOError`): None elsewhere.
    """
    name = errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
    hint = _DISK_HINTS.get(exc.errno or 0)
    where = f" {path!r}" if path else ""
    return LocalIOError(f"local disk: {what}{where} failed: {exc.strerror or exc} ({name}"
                        f"{': ' + hint if hint else ''})", path=path, errno=exc.errno, reason=name,
                        retryable=exc.errno in _RETRYABLE_ERRNOS, stored=stored)


def with_stored(exc: LocalIOError, stored: bool, detail: str = "", **context: Any) -> LocalIOError:
    """``exc`` saying whether the put it interrupted stored its message (``detail`` says
    where; ``context`` adds fields, e.g. the put's result), unless it says so already.

    The message states it too: "the message WAS stored (...): do not put it again" or "the
    message was NOT stored".
    """
    if exc.context.get("stored") is not None:
        return exc
    state = ("the message WAS stored" + (f" ({detail})" if detail else "") + ": do not put it again"
             if stored else "the message was NOT stored")
    out = LocalIOError(f"{exc.message}; {state}", **{**exc.context, **context, "stored": stored})
    out.__cause__ = exc.__cause__
    out.__traceback__ = exc.__traceback__
    return out


__all__ = ["DISK_ERRNOS", "local_io_error", "with_stored"]
