"""docs/ARCHITECTURE.md stays true to the tree, and the code cites only what it holds.

- every path the document names (``tiered_core/...``, ``drivers/...``, ``conformance/...``,
  ``bench/...``, ``tests/...``) exists, and every dotted ``tiered_core.x.Name`` resolves
  to a module and a name that module defines;
- every part of ``tiered_core`` (each package and module directly under it) is placed in
  §2, the layer table, so a new part cannot arrive without a place;
- sections are numbered in order (``## N.``, ``### N.M``), and every
  ``docs/ARCHITECTURE.md §N`` cited in the code, and every ``§N`` inside the document,
  names one of them;
- nothing in the repository cites a design document that is not in it.

Plain text and ``ast`` only: nothing is imported, so the test needs no optional package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
CITED = "docs/ARCHITECTURE.md"
#: Where the project's own code, config and prose live (not the venv, the build, the tools).
SOURCE_DIRS = ("tiered_core", "drivers", "conformance", "bench", "tests", "examples", "docs")
SOURCE_SUFFIXES = {".py", ".pyx", ".toml", ".md", ".cfg", ".txt"}
SKIP_PARTS = {".venv", ".tools", "build", "__pycache__", ".git", "node_modules", ".pytest_cache", ".hypothesis"}
#: Files allowed to cite a design document outside the repository: none. An entry must go
#: once its file no longer cites one (checked below).
PENDING_CITATIONS: set[str] = set()

_PATH = re.compile(r"`((?:tiered_core|drivers|conformance|bench|tests|examples|docs)/[A-Za-z0-9_./-]*)`")
_DOTTED = re.compile(r"`(tiered_core(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")
_HEADING = re.compile(r"^(#{2,3}) (\d+(?:\.\d+)?)\.? (.+)$", re.M)
_CITATION = re.compile(re.escape(CITED) + r" §(\d+(?:\.\d+)?)")
_SECTION_REF = re.compile(r"§(\d+(?:\.\d+)?)")
_FOREIGN_DESIGN = re.compile(r"(?<![A-Za-z_/])DESIGN\.md|\.\./shared\b")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _sections(text: str) -> list[str]:
    return [number for _, number, _ in _HEADING.findall(text)]


def _source_files() -> list[Path]:
    files = [p for p in ROOT.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES | {""}]
    for top in SOURCE_DIRS:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and not SKIP_PARTS & set(path.parts):
                files.append(path)
    return files


def _defined_names(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            names.update(targets)
            if targets == ["_LAZY"] and isinstance(node.value, ast.Dict):
                # a package's names imported on first use (its module __getattr__ serves them)
                names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_path_the_document_names_exists():
    named = sorted(set(_PATH.findall(_doc())))
    assert len(named) > 20, "the document names the modules it describes"
    missing = [p for p in named if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"{CITED} names paths that do not exist: {missing}"


def test_every_dotted_name_the_document_uses_resolves():
    for dotted in sorted(set(_DOTTED.findall(_doc()))):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = _module_file(parts[:cut])
            if module is not None:
                break
        assert module is not None, f"{dotted}: no such module"
        rest = parts[cut:]
        assert len(rest) <= 1, f"{dotted}: {'.'.join(rest)} is not a name of {module.relative_to(ROOT)}"
        if rest:
            assert rest[0] in _defined_names(module), f"{dotted}: {module.relative_to(ROOT)} defines no {rest[0]}"


def test_every_part_of_tiered_core_has_a_place_in_the_layer_table():
    text = _doc()
    layers = text[text.index("## 2. "):text.index("## 3. ")]
    parts = sorted(p.name + ("/" if p.is_dir() else "") for p in (ROOT / "tiered_core").iterdir()
                   if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py"))
    unplaced = [p for p in parts if f"`tiered_core/{p}`" not in layers]
    assert not unplaced, f"parts of tiered_core with no place in {CITED} §2: {unplaced}"


def test_sections_are_numbered_in_order():
    numbers = _sections(_doc())
    tops = [int(n) for n in numbers if "." not in n]
    assert tops == list(range(1, len(tops) + 1)), numbers
    for parent in {n.split(".")[0] for n in numbers if "." in n}:
        subs = [int(n.split(".")[1]) for n in numbers if n.startswith(parent + ".")]
        assert subs == list(range(1, len(subs) + 1)), f"§{parent}: {subs}"


def test_every_citation_names_an_existing_section():
    sections = set(_sections(_doc()))
    cited: dict[str, list[str]] = {}
    for path in _source_files():
        for number in _CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    for number in _SECTION_REF.findall(_doc()):
        cited.setdefault(number, []).append(CITED)
    assert any(CITED not in where for where in cited.values()), "the code cites the document"
    unknown = {n: where for n, where in cited.items() if n not in sections}
    assert not unknown, f"citations of sections {CITED} does not have: {unknown}"


def test_nothing_cites_a_design_document_outside_the_repository():
    me = Path(__file__).resolve()
    citing = sorted(str(p.relative_to(ROOT)) for p in _source_files()
                    if p.resolve() != me and _FOREIGN_DESIGN.search(p.read_text(encoding="utf-8", errors="replace")))
    stale = PENDING_CITATIONS - set(citing)
    assert not stale, f"{sorted(stale)} no longer cite a foreign document: remove them from PENDING_CITATIONS"
    assert [p for p in citing if p not in PENDING_CITATIONS] == [], f"cite {CITED} instead: {citing}"


@pytest.mark.parametrize("number", ["2", "10.2"])
def test_the_checks_see_a_citation(number):
    """The citation pattern matches the form the code uses (guards the regex itself)."""
    assert _CITATION.findall(f"# see {CITED} §{number} for why") == [number]
