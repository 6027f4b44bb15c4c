"""Output paths of the commands that write or delete a directory (an export, a checkpoint, a
migration's target): they never land in, over or around a store.

- :func:`check_output_path` refuses an empty path, and a path that is, contains or lies
  inside a location a store config protects (:func:`protected_locations`): its
  ``store_path``, its tier root (a driver's local ``root`` / ``database`` option, its
  ``url`` option's directory or bucket and prefix; for the object-store drivers the bucket
  or container and prefix, compared when the output is a URL of the same backend) and its metadata file (with SQLite's and the JSON store's
  companion files). Paths are compared after resolving ``~``, ``.``, ``..`` and symbolic
  links, and also by device and inode, so an alias (a symlink, a bind mount) of a store
  directory is refused too.
- :func:`create_output_dir` creates an output directory with a marker file
  (:data:`MARKER`) in it; :func:`remove_output_dir` and :func:`replace_output_dir`
  delete only a directory that holds that marker: a command deletes only what it
  created itself.

Every refusal is an :class:`~tiered_core.errors.InvalidPath` naming the path, the option
it came from, what it collides with and the fix. Config objects are used by duck typing
(``store_path``, ``driver``, ``effective_driver_options()``, ``effective_metadata_path()``,
``source``): this module sits below the config layer.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from typing import Any, Iterable, Protocol
from urllib.parse import urlsplit

from tiered_core.errors import InvalidPath
from tiered_core.flat.ownership import OWNER_DIR, STORE_ID_FILE


class StoreConfig(Protocol):
    """What this module reads of a :class:`tiered_core.config.StoreConfig` (which sits above it)."""

    store_path: str
    driver: str
    source: str | None

    def effective_driver_options(self) -> dict[str, Any]: ...

    def effective_metadata_path(self) -> str: ...

#: The marker file written into every output directory a command creates. A directory
#: without it is never deleted or replaced.
MARKER = ".tiered-output"

#: Driver options holding local paths (as :mod:`tiered_core.config` resolves them).
LOCAL_PATH_OPTIONS = ("root", "database")
#: Driver options holding the tier's URL (the fsspec driver's ``url``): a ``file://`` one
#: protects its directory, an object-store one its bucket and prefix.
URL_OPTIONS = ("url",)

#: Files next to a metadata file that belong to it (SQLite's WAL and journal, the JSON
#: store's backup and its atomic-write temporary).
METADATA_COMPANIONS = ("", "-wal", "-shm", "-journal", ".bak", ".tmp")

#: URL schemes of each object-store family, and the driver names that store there.
_URL_FAMILIES = {
    "gcs": ("gs", "gcs"),
    "azure": ("abfs", "abfss", "wasb", "wasbs", "az", "azure", "adl"),
    "s3": ("s3", "s3a", "s3n"),
}
_SCHEME_FAMILY = {scheme: family for family, schemes in _URL_FAMILIES.items() for scheme in schemes}


@dataclass(frozen=True)
class Protected:
    """One location a store config protects from outputs.

    ``what`` says what it is ("store_path", "tier root (driver option 'root')", "metadata
    file"...), ``key`` the config key or option it comes from, ``source`` the config file.
    A local location has ``path``; an object-store one has ``family`` (gcs, azure, s3),
    ``bucket`` (bucket or container), ``account`` (Azure; None when unknown) and ``prefix``.
    """

    what: str
    key: str
    source: str | None
    path: str | None = None
    family: str | None = None
    bucket: str | None = None
    account: str | None = None
    prefix: str = ""

    def describe(self) -> str:
        where = f" of config {self.source!r}" if self.source else ""
        if self.path is not None:
            return f"the {self.what} {self.path!r}{where}"
        account = f"account {self.account!r} " if self.account else ""
        return (f"the {self.what} ({self.family} {account}bucket/container {self.bucket!r}, prefix "
                f"{self.prefix!r}){where}")


@dataclass(frozen=True)
class OutputPath:
    """A checked output: ``path`` resolved (absolute, symlinks resolved) for a local path,
    or the URL as given (``url`` True)."""

    path: str
    url: bool = False


# -- what a config protects ----------------------------------------------------------------------


def protected_locations(config: StoreConfig, *, companions: bool = True) -> list[Protected]:
    """The locations of ``config``'s store that no output may be, contain or lie inside
    (with ``companions=False``, the metadata file without its companion files)."""
    source = getattr(config, "source", None)
    out = [Protected("store_path", "store_path", source, path=os.fspath(config.store_path))]
    options = config.effective_driver_options()
    for name in LOCAL_PATH_OPTIONS:
        value = options.get(name)
        if isinstance(value, str) and value:
            out.append(Protected(f"tier root (driver {config.driver!r} option {name!r})", f"options.{name}",
                                 source, path=value))
    for name in URL_OPTIONS:
        value = options.get(name)
        if not isinstance(value, str) or not is_url(value):
            continue
        what, key = f"tier root (driver {config.driver!r} option {name!r})", f"options.{name}"
        local = _local_from_url(value)
        parts = None if local is not None else _url_parts(value)
        if local is not None:
            out.append(Protected(what, key, source, path=local))
        elif parts is not None:
            family, bucket, account, prefix = parts
            if bucket:
                out.append(Protected(what, key, source, family=family, bucket=bucket, account=account, prefix=prefix))
    family = _driver_family(config.driver)
    bucket = options.get("container") if family == "azure" else options.get("bucket")
    if family is not None and isinstance(bucket, str) and bucket:
        account = _azure_account(options) if family == "azure" else None
        out.append(Protected(f"tier root (driver {config.driver!r})", "driver", source, family=family,
                             bucket=bucket, account=account, prefix=_norm_key(options.get("prefix") or "")))
    metadata = os.fspath(config.effective_metadata_path())
    for suffix in METADATA_COMPANIONS if companions else ("",):
        what = "metadata file" if not suffix else f"metadata file's companion ({suffix})"
        out.append(Protected(what, "metadata_path", source, path=metadata + suffix))
    return out


def _driver_family(driver: str) -> str | None:
    name = str(driver).lower()
    for family in _URL_FAMILIES:
        if name == family or name.startswith(family + "-") or name.endswith("." + family):
            return family
    return None


def _azure_account(options: dict[str, Any]) -> str | None:
    account = options.get("account_name")
    if isinstance(account, str) and account:
        return account.lower()
    text = options.get("connection_string")
    if isinstance(text, str):
        for part in text.split(";"):
            key, _, value = part.partition("=")
            if key.strip().lower() == "accountname" and value.strip():
                return value.strip().lower()
    return None


# -- comparing -------------------------------------------------------------------------------------


def _norm_key(key: str) -> str:
    return "/".join(part for part in str(key).split("/") if part)


def _key_relation(out: str, protected: str) -> str | None:
    """How object key ``out`` relates to ``protected`` ('' is the whole bucket)."""
    if out == protected:
        return "is"
    if not protected or out.startswith(protected + "/"):
        return "lies inside"
    if not out or protected.startswith(out + "/"):
        return "contains"
    return None


def _forms(path: str) -> set[str]:
    absolute = os.path.abspath(os.path.expanduser(path))
    return {absolute, os.path.realpath(absolute)}


def _inside(path: str, parent: str) -> bool:
    return path != parent and (parent == os.sep or path.startswith(parent.rstrip(os.sep) + os.sep))


def _stat_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _ancestors(path: str) -> list[tuple[int, int]]:
    """Device and inode of ``path`` (when it exists) and of each existing ancestor."""
    keys = []
    current = os.path.realpath(os.path.abspath(path))
    while True:
        key = _stat_key(current)
        if key is not None:
            keys.append(key)
        parent = os.path.dirname(current)
        if parent == current:
            return keys
        current = parent


def _local_relation(out: str, protected: str) -> str | None:
    """'is', 'lies inside' or 'contains' when local path ``out`` overlaps ``protected``."""
    for a in _forms(out):
        for b in _forms(protected):
            if a == b:
                return "is"
            if _inside(a, b):
                return "lies inside"
            if _inside(b, a):
                return "contains"
    # The same directory under another name (a bind mount, a hard-linked file).
    out_key, protected_key = _stat_key(out), _stat_key(protected)
    if out_key is not None and out_key == protected_key:
        return "is"
    if protected_key is not None and protected_key in _ancestors(out)[1:]:
        return "lies inside"
    if out_key is not None and out_key in _ancestors(protected)[1:]:
        return "contains"
    return None


def _url_parts(url: str) -> tuple[str, str, str | None, str] | None:
    """``(family, bucket, account, key)`` of an object-store URL; None for any other URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    family = _SCHEME_FAMILY.get(scheme)
    if scheme in ("http", "https") and ".blob.core." in parts.netloc:
        account = parts.netloc.split(".", 1)[0].lower()
        container, _, key = parts.path.lstrip("/").partition("/")
        return "azure", container, account, _norm_key(key)
    if family is None:
        return None
    netloc = parts.netloc
    account = None
    if "@" in netloc:  # abfss://container@account.dfs.core.windows.net/path
        netloc, _, host = netloc.partition("@")
        account = host.split(".", 1)[0].lower() or None
    return family, netloc, account, _norm_key(parts.path)


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    scheme = urlsplit(str(path)).scheme
    return len(scheme) > 1 and "://" in str(path)


def _local_from_url(path: str) -> str | None:
    """The local path of a ``file://`` (or fsspec ``local://``) URL; None for any other URL."""
    head, sep, rest = str(path).partition("://")
    if not sep or head.lower() not in ("file", "local"):
        return None
    if rest.startswith("localhost/"):
        rest = rest[len("localhost"):]
    return os.path.abspath(os.path.expanduser(rest or "."))


# -- the checks ------------------------------------------------------------------------------------


def collision(path: str, configs: Iterable[StoreConfig]) -> tuple[str, Protected] | None:
    """The protected location of ``configs`` that ``path`` is, contains or lies inside, as
    ``(relation, location)``; the most specific one when there are several ("is" first, then
    the deepest location it lies inside); None when there is none."""
    found = list(_collisions(path, configs))
    if not found:
        return None
    order = {"is": 0, "lies inside": 1, "contains": 2}

    def rank(item: tuple[int, tuple[str, Protected]]) -> tuple[int, int, int]:
        index, (relation, place) = item
        depth = len(place.path or place.prefix or "") if relation == "lies inside" else 0
        return order[relation], -depth, index

    return min(enumerate(found), key=rank)[1]


def _collisions(path: str, configs: Iterable[StoreConfig]) -> Iterable[tuple[str, Protected]]:
    text = os.fspath(path)
    local = _local_from_url(text) if is_url(text) else text
    url = None if local is not None else _url_parts(text)
    for config in configs:
        for place in protected_locations(config):
            if local is not None and place.path is not None:
                relation = _local_relation(local, place.path)
            elif url is not None and place.family is not None:
                family, bucket, account, key = url
                if (family, bucket) != (place.family, place.bucket):
                    continue
                if account and place.account and account != place.account:
                    continue
                relation = _key_relation(key, place.prefix)
            else:
                continue
            if relation is not None:
                yield relation, place


def check_output_path(path: str | os.PathLike | None, configs: Iterable[StoreConfig], *,
                      option: str = "--to", what: str = "output") -> OutputPath:
    """The output ``path`` checked against ``configs``' stores.

    Raises :class:`InvalidPath` (naming ``option``, the path, what it collides with and the
    fix) for an empty path and for a path that is, contains or lies inside a store's
    ``store_path``, tier root or metadata file. Returns the resolved path.
    """
    text = "" if path is None else os.fspath(path)
    if not text.strip():
        raise InvalidPath(f"{option}: the {what} path is empty (an empty path would mean the current directory); "
                          f"give the {what} directory explicitly", path=text, option=option)
    configs = list(configs)
    found = collision(text, configs)
    if found is not None:
        relation, place = found
        shown = text if is_url(text) else os.path.realpath(os.path.abspath(os.path.expanduser(text)))
        raise InvalidPath(
            f"{option}: the {what} {shown!r} {relation} {place.describe()}; writing (or replacing) it there "
            f"would overwrite or delete the store's data. Choose another {option} outside every store's "
            "store_path, tier root and metadata file", path=shown, option=option, relation=relation,
            collides_with=place.what, location=place.path if place.path is not None else place.bucket,
            key=place.key, source=place.source)
    if is_url(text):
        local = _local_from_url(text)
        if local is None:
            return OutputPath(text, url=True)
        text = local
    resolved = os.path.realpath(os.path.abspath(os.path.expanduser(text)))
    found_store = other_store(resolved)
    if found_store is not None:
        relation, where = found_store
        raise InvalidPath(
            f"{option}: the {what} {resolved!r} {relation} {where}, a store that no config of this command names; "
            f"writing (or replacing) it there would overwrite or delete that store's data. Choose another "
            f"{option} outside every store", path=resolved, option=option, relation=relation, location=where)
    return OutputPath(resolved)


def _store_marks(directory: str, depth: int) -> str | None:
    """What in ``directory`` says a store lives there: a store id file (a ``store_path``), or
    an owner record directory ``depth`` levels down (a tier prefix; 2 levels: a tier root,
    ``{cluster}/{broker}/.tiered-owner``). None: nothing."""
    if os.path.isfile(os.path.join(directory, STORE_ID_FILE)):
        return f"the store_path {directory!r}"
    level = [directory]
    for down in range(depth + 1):
        for d in level:
            if os.path.isdir(os.path.join(d, OWNER_DIR)):
                return f"the tier of the store whose prefix is {d!r}"
        if down == depth:
            break
        nxt = []
        for d in level:
            try:
                with os.scandir(d) as entries:
                    nxt += [e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
            except OSError:
                continue
        level = nxt
    return None


def other_store(path: str) -> tuple[str, str] | None:
    """``(relation, what)`` when local ``path`` lies inside, is, or contains a store of any
    config (:func:`_store_marks` of its ancestors and of what it holds), found on disk: an
    output must not land in a store the command was not told about. None: no store there."""
    ancestors, current = [], path
    while True:
        parent = os.path.dirname(current)
        if parent == current:
            break
        ancestors.append(parent)
        current = parent
    for directory in ancestors[:-1]:  # not the file system's root
        found = _store_marks(directory, 2)
        if found is not None:
            return "lies inside", found
    if os.path.isdir(path):
        found = _store_marks(path, 2)
        if found is not None:
            return "is", found
        for root, dirs, files in os.walk(path):
            if STORE_ID_FILE in files:
                return "contains", f"the store_path {root!r}"
            if OWNER_DIR in dirs:
                return "contains", f"the tier of the store whose prefix is {root!r}"
    return None


def check_separate_stores(target: StoreConfig, sources: Iterable[StoreConfig], *, option: str) -> None:
    """Refuse a target store whose local locations (``store_path``, tier root, metadata file)
    or object-store tier are, contain or lie inside a location of one of ``sources``.
    Raises :class:`InvalidPath` naming ``option``."""
    sources = list(sources)
    for place in protected_locations(target, companions=False):
        if place.path is not None:
            found = collision(place.path, sources)
        else:
            found = _tier_collision(place, sources)
        if found is not None:
            relation, other = found
            raise InvalidPath(
                f"{option}: {place.describe()} {relation} {other.describe()}; the target would write into "
                "the source's store. Give the target its own store_path, tier root and metadata file",
                path=place.path if place.path is not None else place.bucket, option=option, relation=relation,
                collides_with=other.what, key=place.key, source=place.source)


def _tier_collision(place: Protected, sources: list[StoreConfig]) -> tuple[str, Protected] | None:
    for config in sources:
        for other in protected_locations(config):
            if other.family is None or (other.family, other.bucket) != (place.family, place.bucket):
                continue
            if place.account and other.account and place.account != other.account:
                continue
            relation = _key_relation(place.prefix, other.prefix)
            if relation is not None:
                return relation, other
    return None


# -- directories a command creates, and only those it deletes ---------------------------------------


def has_marker(path: str) -> bool:
    """Whether directory ``path`` holds the :data:`MARKER` file (a regular file, not a link)."""
    marker = os.path.join(path, MARKER)
    return os.path.isfile(marker) and not os.path.islink(marker)


def write_marker(path: str, created_by: str) -> None:
    """Write the :data:`MARKER` file into directory ``path`` (fsynced)."""
    record = {"created_by": created_by, "created_ms": time.time_ns() // 1_000_000, "host": socket.gethostname(),
              "pid": os.getpid()}
    fd = os.open(os.path.join(path, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def create_output_dir(path: str, created_by: str, *, option: str = "--to") -> str:
    """Create directory ``path`` (its parents as needed) with the marker in it.

    Raises :class:`InvalidPath` when ``path`` already exists (nothing is changed then) or
    cannot be created."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        os.mkdir(path)
    except FileExistsError:
        raise InvalidPath(f"{option}: {path!r} exists", path=path, option=option) from None
    except OSError as exc:
        raise InvalidPath(f"{option}: cannot create {path!r}: {exc.strerror or exc}", path=path,
                          option=option) from None
    write_marker(path, created_by)
    return path


def require_marker(path: str, *, option: str = "--to", action: str = "replace") -> None:
    """Raise :class:`InvalidPath` unless ``path`` is a directory holding the marker."""
    if not os.path.isdir(path):
        raise InvalidPath(f"{option}: refusing to {action} {path!r}: it is not a directory", path=path,
                          option=option, marker=MARKER)
    if not has_marker(path):
        raise InvalidPath(f"{option}: refusing to {action} {path!r}: it holds no {MARKER} marker, so this tool "
                          f"did not create it (an output directory gets one when a tiered command creates it). "
                          f"Remove it yourself if it is disposable, or choose another {option}",
                          path=path, option=option, marker=MARKER)


def remove_output_dir(path: str, *, option: str = "--to") -> None:
    """Delete output directory ``path``, only if it holds the marker (else :class:`InvalidPath`).

    Files that vanish or appear meanwhile (tasks of an interrupted job still finishing
    their writes in it) do not stop the removal: it goes over the directory again."""
    require_marker(path, option=option, action="delete")
    for _ in range(_REMOVE_ROUNDS):
        shutil.rmtree(path, onerror=_vanished_or_refilled)
        if not os.path.lexists(path):
            return
        time.sleep(0.2)
    shutil.rmtree(path)  # still refilled: the error says by what


#: Passes :func:`remove_output_dir` makes over a directory that writers still fill.
_REMOVE_ROUNDS = 5


def _vanished_or_refilled(func, path: str, exc_info) -> None:
    exc = exc_info[1]
    if isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and exc.errno == errno.ENOTEMPTY):
        return  # a writer removed or added an entry meanwhile: the next pass sees the result
    raise exc


def staging_dir(target: str, created_by: str) -> str:
    """A new directory next to ``target`` (same file system) with the marker, to build a
    replacement of ``target`` in."""
    parent, name = os.path.split(target)
    stamp = f"{os.getpid()}-{time.time_ns() // 1_000_000}"
    return create_output_dir(os.path.join(parent, f".{name}.tiered-staging-{stamp}"), created_by)


def replace_output_dir(staged: str, target: str, *, option: str = "--to") -> None:
    """Put directory ``staged`` in place of ``target``: ``target`` must hold the marker (or be
    absent); it is renamed aside, ``staged`` renamed to it, then the old one deleted. Until
    the second rename the old output stays whole."""
    if not os.path.lexists(target):
        os.rename(staged, target)
        return
    require_marker(target, option=option)
    parent, name = os.path.split(target)
    old = os.path.join(parent, f".{name}.tiered-old-{os.getpid()}-{time.time_ns() // 1_000_000}")
    os.rename(target, old)
    try:
        os.rename(staged, target)
    except OSError:
        os.rename(old, target)
        raise
    remove_output_dir(old, option=option)


__all__ = ["LOCAL_PATH_OPTIONS", "MARKER", "METADATA_COMPANIONS", "OutputPath", "Protected", "URL_OPTIONS",
           "check_output_path", "check_separate_stores", "collision", "create_output_dir", "has_marker", "is_url",
           "protected_locations", "remove_output_dir", "replace_output_dir", "require_marker", "staging_dir",
           "write_marker"]
