"""Bytecode inside the pyspark zips that Spark's own Python processes import.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the
``PYTHONPATH`` of every Python process it starts. These processes are the driver-side
runner of each Python streaming query, the daemon of each executor, and the planner of a
Python data source. pip's pyspark ships those zips with sources only, and Python's
zipimport never writes bytecode. So each such process compiles from source every pyspark
module it imports.

On a 2-core machine that takes about a second per process. A Python streaming query pays
it on every start: the one-row source of ``bench/spark_stream.py`` spent 1.5 s outside its
trigger without bytecode and 0.75 s with it.

:func:`add_bytecode` writes a ``.pyc`` beside each ``.py`` of a zip, in the layout
zipimport reads (``pkg/mod.pyc`` next to ``pkg/mod.py``). The ``.pyc`` files are
unchecked hash-based pycs. Sources and bytecode are written together into one new file,
which then replaces the zip, so they cannot drift apart. An interpreter of another version
sees a foreign magic number and falls back to the source, as it did before. The sources stay
in the zip, so tracebacks still show lines.

The new zip leaves out pyspark's own test suites (``*/tests/*``: 1,041 of the 1,841 entries
of pyspark 4's zip), which no job imports. Each of those processes calls
``importlib.invalidate_caches()`` as it sets up (pyspark's worker set-up), and on Python
3.11 that makes every zipimporter of the zip -- one per pyspark package imported, 17 for a
streaming source's runner -- read the zip's whole directory again: 0.107 s of CPU per
process with the suites in the zip, 0.040 s without.

``python -m tiered_core.spark.pyspark_bytecode`` (run by ``make setup``) does this to the
installed pyspark's zips, and leaves a zip alone when it already holds this interpreter's
bytecode and no test suite. Reinstalling pyspark brings back the source-only zips, and the
next run compiles them again.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile

#: Entries under this folder are pyspark's own test suites: left out of the zip.
_TEST_SUITES = "/tests/"
#: Modules under these folders are pyspark's testing helpers (a public API for users' tests,
#: kept in the zip): never imported by a job, so not compiled.
_SKIPPED_PARTS = ("/testing/",)


def _compiled(source: bytes, name: str) -> bytes | None:
    """The unchecked hash-based pyc of ``source`` (PEP 552: magic, flags 0b01, source hash,
    marshalled code), or None when it does not compile here."""
    try:
        with warnings.catch_warnings():  # pyspark's sources warn under newer grammars; not ours to report
            warnings.simplefilter("ignore")
            code = compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(source) + marshal.dumps(code)


def _wanted(name: str) -> bool:
    return name.endswith(".py") and not any(part in "/" + name for part in _SKIPPED_PARTS)


def _test_suite(name: str) -> bool:
    return _TEST_SUITES in "/" + name


def holds_test_suites(path: str | os.PathLike) -> bool:
    """Whether the zip at ``path`` still holds entries of pyspark's own test suites."""
    with zipfile.ZipFile(path) as archive:
        return any(_test_suite(n) for n in archive.namelist())


def has_bytecode(path: str | os.PathLike) -> bool:
    """Whether the zip at ``path`` holds bytecode of this interpreter's version and of no other
    (:func:`add_bytecode` writes all of a zip's bytecode at once, so some means all)."""
    with zipfile.ZipFile(path) as archive:
        compiled = [n for n in archive.namelist() if n.endswith(".pyc")]
        return bool(compiled) and all(archive.read(n)[:4] == importlib.util.MAGIC_NUMBER for n in compiled)


def add_bytecode(path: str | os.PathLike) -> int:
    """Rewrite the zip at ``path`` with a ``.pyc`` beside each ``.py`` and without the test
    suites (see the module doc); returns how many modules were compiled. Bytecode already in
    the zip is replaced. The new
    zip is written beside the old one and then replaces it, so an interrupted run leaves the
    old zip whole. Raises :class:`OSError` / :class:`zipfile.BadZipFile` for a zip it cannot
    read or write."""
    path = os.path.abspath(path)
    compiled = 0
    fd, temp = tempfile.mkstemp(prefix=".bytecode-", suffix=".zip", dir=os.path.dirname(path) or ".")
    os.close(fd)
    try:
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename.endswith(".pyc") or _test_suite(info.filename):
                    continue  # bytecode of an earlier run (perhaps of another interpreter), or a test suite
                data = source.read(info)
                target.writestr(info, data)
                if not _wanted(info.filename):
                    continue
                # Named as zipimport names the modules it compiles itself, so tracebacks read the same.
                pyc = _compiled(data, os.path.join(path, info.filename))
                if pyc is None:
                    continue
                entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                target.writestr(entry, pyc)
                compiled += 1
        os.chmod(temp, os.stat(path).st_mode & 0o777)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return compiled


def spark_python_zips() -> list[str]:
    """The zips Spark puts on its Python processes' path: ``python/lib/*.zip`` of the installed
    pyspark (pip's layout, where ``SPARK_HOME`` is the pyspark package). Empty when pyspark is
    not installed or has no such folder."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return []
    lib = os.path.join(list(spec.submodule_search_locations)[0], "python", "lib")
    if not os.path.isdir(lib):
        return []
    return sorted(os.path.join(lib, n) for n in os.listdir(lib) if n.endswith(".zip"))


def main(argv: list[str] | None = None) -> int:
    """Rewrite the installed pyspark's zips that lack this interpreter's bytecode or still hold
    test suites; one line each."""
    for path in spark_python_zips():  # none without pyspark: nothing to say
        if has_bytecode(path) and not holds_test_suites(path):
            continue
        count = add_bytecode(path)
        print(f"pyspark bytecode: compiled {count} modules into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
