"""The Spark driver JVM's class-data archive (tiered_core/spark/jvm_archive.py): used only when whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

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


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry))
    return members


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_ctrl_c_stops_a_build_started_in_the_background_of_a_shell(tmp_path):
    """`make test` starts the build with `&` in its recipe's shell, which starts it with SIGINT
    ignored: a Ctrl-C of the terminal (SIGINT to the whole group) still ends the build, its
    warm-up and Spark's JVM, and leaves no archive or partial one behind."""
    check_java()
    folder = tmp_path / "archives"
    env = dict(os.environ, TIERED_SPARK_JVM_ARCHIVE_DIR=str(folder))
    shell = subprocess.Popen(["sh", "-c", f"{sys.executable} -m tiered_core.spark.jvm_archive & wait"],
                             env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 60
        while not any("SparkSubmit" in _cmdline(pid) for pid in _session_members(shell.pid)):  # Spark's JVM is up
            assert time.monotonic() < deadline and shell.poll() is None, "the warm-up started no JVM"
            time.sleep(0.1)
        os.killpg(shell.pid, signal.SIGINT)
        _, err = shell.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while _session_members(shell.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_members(shell.pid) == [], [_cmdline(p)[:200] for p in _session_members(shell.pid)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert "spark JVM archive: interrupted, not built" in err, err[-2000:]
    assert not folder.exists() or os.listdir(folder) == []


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
