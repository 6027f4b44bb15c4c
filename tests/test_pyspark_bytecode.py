"""Bytecode inside pyspark's zips (tiered_core/spark/pyspark_bytecode.py): what zipimport loads."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile

from tiered_core.spark import pyspark_bytecode
from tiered_core.spark.pyspark_bytecode import add_bytecode, has_bytecode, holds_test_suites

SOURCES = {
    "pkg/__init__.py": "",
    "pkg/mod.py": "VALUE = 41 + 1\ndef where():\n    return where.__code__.co_filename\n",
    "pkg/broken.py": "def (:\n",
    "pkg/tests/test_mod.py": "assert True\n",
    "pkg/data.txt": "not python",
}


def make_zip(path, entries=SOURCES) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return str(path)


def import_from(zip_path: str, module: str) -> list[str]:
    """``module``'s origin and VALUE, imported in a fresh interpreter with only the zip on its path."""
    done = subprocess.run([sys.executable, "-S", "-c", f"import {module} as m; print(m.__spec__.origin); print(m.VALUE)"
                           + "; print(m.where()) if hasattr(m, 'where') else None"],
                          env={"PYTHONPATH": zip_path, "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_every_module_gets_bytecode_that_zipimport_loads_and_the_sources_stay(tmp_path):
    path = make_zip(tmp_path / "lib.zip")
    # zipimport names the code it compiles after the zip's path: the bytecode's code keeps that name.
    assert import_from(path, "pkg.mod") == [f"{path}/pkg/mod.py", "42", f"{path}/pkg/mod.py"]
    assert not has_bytecode(path)

    assert add_bytecode(path) == 2  # __init__ and mod; the broken module keeps only its source

    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        assert archive.read("pkg/mod.py") == SOURCES["pkg/mod.py"].encode()
        assert archive.read("pkg/mod.pyc")[:4] == importlib.util.MAGIC_NUMBER
    # no pyc for the broken one; the test suite is left out
    assert set(SOURCES) - {"pkg/tests/test_mod.py"} | {"pkg/__init__.pyc", "pkg/mod.pyc"} == names
    assert has_bytecode(path) and not holds_test_suites(path)
    assert import_from(path, "pkg.mod") == [f"{path}/pkg/mod.pyc", "42", f"{path}/pkg/mod.py"]


def test_bytecode_of_another_interpreter_is_replaced(tmp_path):
    foreign = b"\x00\x00\r\n" + bytes(12) + b"garbage"
    path = make_zip(tmp_path / "lib.zip", {"pkg/__init__.py": "", "pkg/__init__.pyc": foreign,
                                           "pkg/mod.py": "VALUE = 7\n", "pkg/mod.pyc": foreign})
    assert not has_bytecode(path)
    assert import_from(path, "pkg.mod") == [f"{path}/pkg/mod.py", "7"]  # zipimport falls back to the source

    assert add_bytecode(path) == 2
    assert has_bytecode(path)
    assert import_from(path, "pkg.mod") == [f"{path}/pkg/mod.pyc", "7"]


def test_a_failed_rewrite_leaves_the_zip_whole(tmp_path, monkeypatch):
    path = make_zip(tmp_path / "lib.zip")
    before = open(path, "rb").read()

    def fail(source, name):
        raise OSError("disk full")

    monkeypatch.setattr(pyspark_bytecode, "_compiled", fail)
    try:
        add_bytecode(path)
    except OSError:
        pass
    else:
        raise AssertionError("the rewrite did not fail")
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["lib.zip"]  # no temporary file left behind


def test_the_command_compiles_each_zip_once(tmp_path, monkeypatch, capsys):
    zips = [make_zip(tmp_path / "a.zip"), make_zip(tmp_path / "b.zip")]
    monkeypatch.setattr(pyspark_bytecode, "spark_python_zips", lambda: zips)

    assert pyspark_bytecode.main([]) == 0
    assert capsys.readouterr().out.splitlines() == [f"pyspark bytecode: compiled 2 modules into {z}" for z in zips]
    assert pyspark_bytecode.main([]) == 0
    assert capsys.readouterr().out == ""
    assert all(has_bytecode(z) for z in zips)


def test_a_zip_with_bytecode_and_test_suites_is_rewritten_without_them(tmp_path, monkeypatch, capsys):
    """A zip prepared before test suites were left out (bytecode, and pkg/tests/) is rewritten once."""
    path = make_zip(tmp_path / "lib.zip")
    with zipfile.ZipFile(path, "a") as archive:  # as an earlier run left it: bytecode beside the suites
        archive.writestr("pkg/mod.pyc", pyspark_bytecode._compiled(SOURCES["pkg/mod.py"].encode(), "mod"))
    assert has_bytecode(path) and holds_test_suites(path)
    monkeypatch.setattr(pyspark_bytecode, "spark_python_zips", lambda: [path])

    assert pyspark_bytecode.main([]) == 0
    assert capsys.readouterr().out.splitlines() == [f"pyspark bytecode: compiled 2 modules into {path}"]
    assert has_bytecode(path) and not holds_test_suites(path)
    assert import_from(path, "pkg.mod") == [f"{path}/pkg/mod.pyc", "42", f"{path}/pkg/mod.py"]


def test_the_installed_pyspark_zips_are_found():
    pyspark = importlib.util.find_spec("pyspark")
    lib = os.path.join(list(pyspark.submodule_search_locations)[0], "python", "lib")
    assert any(path.endswith(os.sep + "pyspark.zip") for path in pyspark_bytecode.spark_python_zips())
    assert all(os.path.dirname(path) == lib for path in pyspark_bytecode.spark_python_zips())
