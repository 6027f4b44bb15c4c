"""The README's code runs.

Every ```python block of README.md runs as its own script (a child interpreter, in a
scratch directory holding a copy of ``examples/``, as a reader who pastes it into a file
in a checkout would run it); the test fails when a block raises. The driver-writing
blocks run too (defining the hook and the test class is what they do); on top of that
the hook block is checked against the hook specifications and called the way the plugin
manager calls it, and the conformance subclass is checked to be a collectable suite (the
suite itself is not run here). ```json and ```toml blocks must parse, and every
``tiered`` subcommand the "Command line" block names must exist.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = README.parent / "examples"

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)


def blocks(lang: str) -> list[tuple[int, str]]:
    """``(line number, dedented code)`` of every fenced block of ``lang`` in the README."""
    text = README.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        if m.group("lang") != lang:
            continue
        indent = len(m.group("indent"))
        code = "\n".join(line[indent:] for line in m.group("body").splitlines()) + "\n"
        found.append((text.count("\n", 0, m.start()) + 1, code))
    return found


PYTHON_BLOCKS = blocks("python")


def test_the_readme_has_its_python_blocks():
    """Guard against the parser silently finding nothing (then the test below proves nothing)."""
    codes = [code for _, code in PYTHON_BLOCKS]
    assert len(codes) >= 3, [line for line, _ in PYTHON_BLOCKS]
    assert any("TieredMessageStore.open" in c for c in codes)
    assert any("@hookimpl" in c for c in codes)
    assert any("DriverConformance" in c for c in codes)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch directory with a copy of the repository's examples/ (configs, example driver)."""
    shutil.copytree(EXAMPLES, tmp_path / "examples",
                    ignore=shutil.ignore_patterns("demo-data", "__pycache__", "*.egg-info", "build"))
    return tmp_path


@pytest.mark.parametrize("line, code", PYTHON_BLOCKS, ids=[f"README.md:{line}" for line, _ in PYTHON_BLOCKS])
def test_python_block_runs(line, code, workdir, python_exe, subprocess_env):
    script = workdir / f"readme_block_{line}.py"
    script.write_text(code)
    env = {k: v for k, v in subprocess_env.items() if not k.startswith("TIERED_")}
    proc = subprocess.run([python_exe, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"README.md line {line} raised:\n{code}\n--- stderr ---\n{proc.stderr[-4000:]}"


def test_usage_block_really_stored_and_read(workdir, python_exe, subprocess_env):
    """The usage block prints what its comment promises, from a store under examples/."""
    (line, code), = [(n, c) for n, c in PYTHON_BLOCKS if "TieredMessageStore.open(StoreConfig.load" in c]
    script = workdir / "usage.py"
    script.write_text(code)
    proc = subprocess.run([python_exe, str(script)], cwd=workdir, env=subprocess_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == ["PUT_OK", "FOUND", "b'...'"], proc.stdout
    assert (workdir / "examples" / "demo-data" / "tiered-metadata.db").exists()


def test_s3_block_stores_in_moto_and_reads_back(workdir, python_exe, subprocess_env):
    """The "Using S3" block starts moto, stores a message in its bucket and reads it back."""
    (line, code), = [(n, c) for n, c in PYTHON_BLOCKS if "MotoServer" in c]
    script = workdir / "using_s3.py"
    script.write_text(code)
    proc = subprocess.run([python_exe, str(script)], cwd=workdir, env=subprocess_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == ["FOUND", "b'paid'"], proc.stdout


def test_hook_block_registers_a_driver():
    """The hookimpl block implements a real hook and registers the class it is given."""
    from tiered_core.spi import hookspecs

    (_, code), = [(n, c) for n, c in PYTHON_BLOCKS if "@hookimpl" in c]
    from tiered_driver_sqlite import SqliteDriver

    namespace: dict = {"SqliteDriver": SqliteDriver}  # defined in the driver's own module
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    hooks = [v for v in namespace.values() if callable(v) and hasattr(v, f"{hookspecs.PROJECT}_impl")]
    assert hooks, "the block defines no @hookimpl function"
    registered = []
    for hook in hooks:
        assert hasattr(hookspecs, hook.__name__), f"{hook.__name__} is not a hook specification"
        hook(register=registered.append)
    assert registered == [SqliteDriver]


def test_conformance_block_defines_a_suite():
    from tiered_conformance import DriverConformance

    (_, code), = [(n, c) for n, c in PYTHON_BLOCKS if "DriverConformance" in c]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - defines a class, runs no test
    suites = [v for k, v in namespace.items() if isinstance(v, type) and issubclass(v, DriverConformance)
              and v is not DriverConformance]
    assert suites and all(s.__name__.startswith("Test") for s in suites)
    assert all("driver" in vars(s) for s in suites), "the subclass must define the driver fixture"


@pytest.mark.parametrize("line, code", blocks("json"), ids=[f"README.md:{n}" for n, _ in blocks("json")])
def test_json_block_parses(line, code):
    json.loads(code)


@pytest.mark.parametrize("line, code", blocks("toml"), ids=[f"README.md:{n}" for n, _ in blocks("toml")])
def test_toml_block_parses(line, code):
    tomllib.loads(code)


def test_command_line_block_names_real_subcommands():
    from tiered_core.cli import main

    commands = set()
    for _, code in blocks("sh"):
        for line in code.splitlines():
            m = re.match(r"\.venv/bin/tiered\s+([a-z][\w|-]*)(?:\s+([a-z][\w-]*))?", line)
            if m:
                for name in m.group(1).split("|"):
                    commands.add((name, m.group(2) if name in ("metadata", "spark") else None))
    assert {("put", None), ("demo", None), ("metadata", "rebuild")} <= commands
    for name, action in sorted(commands, key=str):
        argv = [name, action, "--help"] if action else [name, "--help"]
        assert main(argv) == 0, f"README names `tiered {' '.join(argv[:-1])}`, which does not exist"


def test_checking_and_repairing_section_names_every_finding_kind_and_fault():
    """The section's table names every kind verify reports, and its drill list every fault
    the kit plants (the drill block itself runs with the other Python blocks)."""
    from tiered_conformance.drills import FAULTS
    from tiered_core.ops.findings import FindingKind

    text = README.read_text(encoding="utf-8")
    start = text.index("## Checking and repairing a tier")
    section = text[start:text.index("\n## ", start + 1)]
    assert [k.value for k in FindingKind if f"`{k.value}`" not in section] == []
    assert [f for f in FAULTS if f"`{f}`" not in section] == []
    assert any("plant(" in code and "repair" in code for _, code in PYTHON_BLOCKS)
