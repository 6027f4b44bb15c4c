"""gcsfs as the gcs driver's transport: one GCSFileSystem per driver, every request passed
through the request hook point, every failure translated into a typed error.

gcsfs carries the HTTP session (on fsspec's I/O thread), the credentials (google-auth:
the standard chain, service-account files, authorized-user dicts, the metadata server,
credentials objects) and the retries of each request (HTTP 408/429/5xx, connection
errors and token refresh failures, with gcsfs's exponential backoff). Two things are
added here, both through the hook gcsfs routes every JSON-API request through
(``GCSFileSystem._request``):

* the :class:`~tiered_core.spi.transport.RequestHookPoint` sees every HTTP attempt
  (gcsfs's retries included): a hook installed there (tests, benchmarks) may count it,
  fail it with a status (gcsfs then treats it as it would the real answer: a 503 is
  retried, a 412 becomes ``FileExistsError``) or carry it out and lose the answer (a
  ``ConnectionResetError``, which gcsfs does not retry, so the driver sees the loss);
* the number of retries is the driver's ``retries`` option: gcsfs fixes it at 6 tries in
  the decorator of ``_request``, so the undecorated function (``__wrapped__``) is
  decorated again with gcsfs's own ``retry_request``. A request marked *once* (compose)
  skips the retries: the driver itself finds out whether a compose whose answer was lost
  took place.

The file system is ``gcsfs.core.GCSFileSystem``, never the ``gcsfs.GCSFileSystem`` alias,
which ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` (on by default) swaps for a class that first
probes each bucket's type over gRPC: that probe stalls for minutes against an emulator,
and zonal buckets' appendable objects are not this driver's layout. Listings are never
cached (``use_listings_cache=False``) and instances never shared
(``skip_instance_cache=True``): another writer's part must show in the next listing.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

from tiered_core.errors import DriverError, InvalidOption
from tiered_core.spi.transport import LOST_ANSWER, RequestHookPoint, is_transient

log = logging.getLogger("tiered_driver_gcs")

T = TypeVar("T")

#: ``token`` values that name a credential method rather than hold a credential.
TOKEN_METHODS = ("google_default", "cloud", "anon")
_INJECTED = b'{"error": {"message": "injected fault"}}'


@dataclass(frozen=True)
class _Scope:
    what: str = "gcs request"
    once: bool = False


# Set around each driver operation on the I/O loop, read by every request it sends.
_SCOPE: contextvars.ContextVar[_Scope] = contextvars.ContextVar("tiered_gcs_scope", default=_Scope())


def check_token(token: Any) -> Any:
    """``token`` as gcsfs takes it, refusing what this driver does not accept.

    None (the standard chain: application-default credentials, the metadata server on
    Google Cloud, else anonymous), ``"google_default"``, ``"cloud"``, ``"anon"``, a path
    to a service-account or authorized-user JSON file, its parsed dict, or a google-auth
    credentials object. A bare string that is none of these (gcsfs would send it to
    Google's token-info endpoint as a raw access token) is refused; pass a
    ``google.oauth2.credentials.Credentials`` object for that.
    """
    if isinstance(token, os.PathLike):
        token = os.fspath(token)
    if token is None or isinstance(token, dict) or token in TOKEN_METHODS:
        return token
    if isinstance(token, str):
        if os.path.isfile(token):
            return token
    else:
        import google.auth.credentials

        if isinstance(token, google.auth.credentials.Credentials):
            return token
    # Never echo the value: it may be a credential itself.
    raise InvalidOption("option 'token' of driver 'gcs' is not a JSON key file, 'google_default', 'cloud', "
                        "'anon', a dict or a credentials object", option="token")


@functools.lru_cache(maxsize=1)
def filesystem_class() -> type:
    """``gcsfs.core.GCSFileSystem`` with every HTTP attempt passing a :class:`RequestHookPoint`."""
    from gcsfs.core import GCSFileSystem
    from gcsfs.retry import retry_request, validate_response

    # The request function without gcsfs's retry decorator (None if a gcsfs release
    # stops exposing it: then the hook point sees each request once, retries included).
    unretried = getattr(GCSFileSystem._request, "__wrapped__", None)

    class HookedGCSFileSystem(GCSFileSystem):
        """gcsfs whose requests pass ``hooks``, ``tries`` attempts each (one when marked *once*)."""

        def __init__(self, *args: Any, hooks: RequestHookPoint, tries: int, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.hooks = hooks
            self._retrying = retry_request(retries=tries)(HookedGCSFileSystem._send)

        async def _request(self, method, path, *args, **kwargs):
            if unretried is None or _SCOPE.get().once:
                return await self._send(method, path, *args, **kwargs)
            return await self._retrying(self, method, path, *args, **kwargs)

        async def _send(self, method, path, *args, **kwargs):
            """One attempt, failed or its answer lost where an installed hook says."""
            verdict = self.hooks.before(method, _SCOPE.get().what)
            if verdict is not None and verdict != LOST_ANSWER:
                validate_response(int(verdict), _INJECTED, path, args)  # raises what gcsfs would
            if unretried is None:
                out = await GCSFileSystem._request(self, method, path, *args, **kwargs)
            else:
                out = await unretried(self, method, path, *args, **kwargs)
            if verdict == LOST_ANSWER:
                raise self.hooks.answer_lost()
            return out

    return HookedGCSFileSystem


class GcsTransport:
    """One bucket's gcsfs file system, its request hook point, and the translation of failures.

    :meth:`run` executes a gcsfs coroutine for one driver request on gcsfs's I/O loop
    and returns its result. ``FileNotFoundError`` (HTTP 404) and ``FileExistsError``
    (HTTP 412, a failed precondition) pass through for the driver to interpret; every
    other failure becomes a :class:`~tiered_core.errors.DriverError`: retryable when it
    may pass (what gcsfs retries, timeouts, connection failures), not when access is
    denied (401/403, the message says so) or the request is malformed. Messages name the
    request and the bucket, never a credential. Thread-safe; a forked child makes its
    own file system on first use.
    """

    def __init__(self, *, bucket: str, token: Any, endpoint: str | None, project: str | None,
                 timeout: float, retries: int) -> None:
        self.bucket = bucket
        self.hooks = RequestHookPoint()
        self._options: dict[str, Any] = {
            "token": check_token(token), "endpoint_url": endpoint, "requests_timeout": timeout,
            "use_listings_cache": False, "skip_instance_cache": True,
        }
        if project:
            self._options["project"] = project
        self._tries = retries + 1
        self._pid = 0
        self._fs: Any = None
        self._connect()  # credentials are resolved now, so that a bad token fails at open

    def _connect(self) -> Any:
        self._fs = filesystem_class()(hooks=self.hooks, tries=self._tries, **self._options)
        self._pid = os.getpid()
        return self._fs

    @property
    def fs(self) -> Any:
        """The gcsfs file system (made on first use in this process)."""
        if self._fs is None or self._pid != os.getpid():
            return self._connect()
        return self._fs

    def run(self, what: str, make: Callable[[Any], Awaitable[T]], *, once: bool = False) -> T:
        """``await make(fs)`` on gcsfs's loop, its requests described by ``what``;
        ``once``: no retries (a request that must not be resent blindly)."""
        import fsspec.asyn

        fs = self.fs

        async def scoped() -> T:
            _SCOPE.set(_Scope(what, once))
            return await make(fs)

        try:
            return fsspec.asyn.sync(fs.loop, scoped)
        except (FileNotFoundError, FileExistsError, DriverError, InvalidOption):
            raise
        except Exception as exc:  # every library failure becomes typed
            raise self.translate(exc, what) from None

    def translate(self, exc: BaseException, what: str) -> DriverError:
        """The typed error for a failure of request ``what`` (never quoting a credential)."""
        from gcsfs.retry import HttpError, is_retriable
        import google.auth.exceptions

        where = f"bucket {self.bucket!r}"
        status = getattr(exc, "code", None) if isinstance(exc, HttpError) else None
        text = str(exc).split("\n", 1)
        if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and text[0].startswith("Forbidden")) \
                or status in (401, 403):
            code = status or 403
            return DriverError(f"gcs: access denied ({code}) to {what} in {where}: check the credentials and IAM "
                               f"permissions", retryable=False, bucket=self.bucket, status=code)
        if isinstance(exc, google.auth.exceptions.GoogleAuthError):
            # Its message may carry a token endpoint's answer: only the type is kept.
            retryable = is_retriable(exc)
            return DriverError(f"gcs: {what} in {where} failed: credentials could not be used "
                               f"({type(exc).__name__})", retryable=retryable, bucket=self.bucket)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if status is not None:
            try:
                code = int(status)
            except (TypeError, ValueError):
                code = 0
            return DriverError(f"gcs: {what} in {where} failed: HTTP {code} {getattr(exc, 'message', '')}".rstrip(),
                               retryable=is_transient(code) or code >= 500, bucket=self.bucket, status=code)
        if isinstance(exc, ValueError):  # gcsfs's "Bad Request" (HTTP 400)
            return DriverError(f"gcs: {what} in {where} was refused: {detail}", retryable=False,
                               bucket=self.bucket, status=400)
        # What gcsfs retries (connection errors, 502, checksum mismatches), timeouts,
        # resets, a lost answer: the operation may succeed when repeated.
        retryable = is_retriable(exc) or isinstance(exc, (OSError, TimeoutError))
        return DriverError(f"gcs: {what} in {where} failed: {detail}", retryable=retryable, bucket=self.bucket)

    def close(self) -> None:
        fs, self._fs = self._fs, None
        if fs is None or self._pid != os.getpid():
            return
        session = getattr(fs, "session", None)
        if session is None or session.closed:
            return
        import fsspec.asyn

        with contextlib.suppress(Exception):  # closing is best effort
            fsspec.asyn.sync(fs.loop, session.close, timeout=10)


__all__ = ["GcsTransport", "TOKEN_METHODS", "check_token", "filesystem_class"]
