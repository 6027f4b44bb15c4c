"""One botocore session per process for the s3fs filesystems this driver opens.

s3fs makes a botocore session for every filesystem that is not given one, and a client of
a fresh session loads S3's service model again: opening an fsspec driver on ``s3://`` took
165 ms of CPU up to its first answer (measured against moto), 38 ms with a shared session.
That is paid per driver, so per Spark task and per CLI command.

Only options s3fs takes itself share the session: a key given in ``storage_options`` is
handed to each client, never kept in the session. Any other key (``profile``, or whatever
s3fs passes on to its session) gets a session of its own, as s3fs would make it, and so
does a filesystem other than s3fs.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Mapping

#: The s3fs filesystem class, by module and name (fsspec's ``s3://`` and ``s3a://``).
S3FS_CLASS = "s3fs.core.S3FileSystem"
#: Options of fsspec's base filesystem that s3fs passes on to it (not to its session).
_FSSPEC_BASE = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache",
                          "asynchronous", "loop", "batch_size"})

_LOCK = threading.Lock()
_SESSION: Any = None


def with_shared_session(fs_class: type | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` for ``fs_class``, with this process's botocore session added when the
    class is s3fs's and ``options`` name neither a session nor anything that shapes one."""
    out = dict(options)
    if fs_class is None or f"{fs_class.__module__}.{fs_class.__qualname__}" != S3FS_CLASS or "session" in out:
        return out
    own = {name for name in inspect.signature(fs_class.__init__).parameters if name != "self"} | _FSSPEC_BASE
    if set(out) - own:
        return out  # session options: s3fs makes this filesystem a session of its own
    out["session"] = _shared_session()
    return out


def _shared_session() -> Any:
    global _SESSION
    with _LOCK:
        if _SESSION is None:
            import aiobotocore.session

            _SESSION = aiobotocore.session.AioSession()
        return _SESSION
