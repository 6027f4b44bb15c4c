"""The Spark driver JVM's class-data archive (tiered_core/spark/jvm_archive.py): used only when whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tiered_conformance.testing import ci_mode
from tiered_core.spark import jvm_archive
from tiered_core.spark.session import DEFAULT_CONF, check_java, session_settings

JAVA = 'openjdk version "17.0.0" 2099-01-01'  # any `java -version` line names an archive


@pytest.fixture
def archive_dir(tmp_path, monkeypatch):
    folder = tmp_path / "archives"
    monkeypatch.setenv("TIERED_SPARK_JVM_ARCHIVE_DIR", str(folder))
    return folder


def plant_archive(size: int = 4096) -> str:
    """A file at the archive's path with a sidecar recording its size, as build() leaves one."""
    path = jvm_archive.archive_path(JAVA)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    with open(path + ".json", "w") as f:
        f.write(f'{{"size": {size}}}')
    return path


def test_without_an_archive_the_session_settings_are_the_callers(archive_dir):
    assert jvm_archive.java_options(JAVA) == ""
    assert session_settings(JAVA, {"spark.driver.extraJavaOptions": "-Dx=1"}) == {
        **DEFAULT_CONF, "spark.driver.extraJavaOptions": "-Dx=1"}


def test_the_archive_goes_before_the_callers_java_options(archive_dir):
    path = plant_archive()
    options = session_settings(JAVA, {"spark.driver.extraJavaOptions": "-Dx=1"})["spark.driver.extraJavaOptions"]
    assert options.startswith(f"-XX:SharedArchiveFile={path} ") and options.endswith(" -Dx=1")
    assert "-Xlog:cds=off" in options  # a refused archive must not print on a --json command's stdout
    assert "spark.driver.extraJavaOptions" not in session_settings(JAVA, class_archive=False)


def test_a_truncated_archive_or_one_without_its_sidecar_is_not_used(archive_dir):
    # The JVM does not check an archive's contents and dies of SIGBUS on a truncated one.
    path = plant_archive()
    assert jvm_archive.java_options(JAVA)
    os.truncate(path, 1024)
    assert jvm_archive.java_options(JAVA) == ""
    plant_archive()
    os.unlink(path + ".json")
    assert jvm_archive.java_options(JAVA) == ""


def test_a_failed_warm_up_leaves_no_archive(archive_dir, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_WARM_UP", "import sys; print('no Spark here', file=sys.stderr); sys.exit(3)")
    with pytest.raises(RuntimeError, match="exited 3: no Spark here"):
        jvm_archive.build(JAVA)
    assert os.listdir(archive_dir) == []
    assert jvm_archive.java_options(JAVA) == ""


def test_a_new_session_loads_sparks_classes_from_the_built_archive(tmp_path):
    """The archive `make test` built (python -m tiered_core.spark.jvm_archive) is mapped by a
    new driver JVM: Spark's classes load from it ("shared objects file (top)")."""
    java = check_java()
    if not jvm_archive.usable(jvm_archive.archive_path(java)):
        message = "no JVM archive built: run `python -m tiered_core.spark.jvm_archive` (make test does)"
        if ci_mode():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    log = tmp_path / "classes.log"
    script = ("import sys; from tiered_core.spark import get_session; "
              "s = get_session('local[1]', conf={'spark.driver.extraJavaOptions': sys.argv[1]}); "
              "print(s.range(10).count()); s.stop()")
    done = subprocess.run([sys.executable, "-c", script, f"-Xlog:class+load=info:file={log}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["10"]  # nothing of the JVM's on stdout
    spark_classes = [line for line in log.read_text().splitlines() if " org.apache.spark." in line]
    shared = [line for line in spark_classes if "source: shared objects file (top)" in line]
    assert spark_classes and len(shared) > len(spark_classes) // 2, spark_classes[:5]
