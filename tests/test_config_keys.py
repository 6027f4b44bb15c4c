"""Issue 10: each config key is declared once (tiered_core/configdef/keys.py), and everything
else -- StoreConfig's fields, the broker.conf mapping, TIERED_* overrides, README's key table,
every sub-config -- is made from the declaration. Also: max_pending_limit is honoured."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import threading

import pytest

from store_workload import memory_options, small_config
from tiered_core import Message, StoreConfig
from tiered_core.access.cache import ReadAheadCache
from tiered_core.access.dispatcher import DispatchConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.common import FileSegmentType
from tiered_core.config import _ROCKETMQ_ROOT_KEYS, _ROCKETMQ_SWITCHES, ROCKETMQ_IGNORED_TIERED_KEYS, ROCKETMQ_KEYS
from tiered_core.configdef import IGNORED_ROCKETMQ_KEYS, KEYS, Keys, bound_fields, markdown_table, with_table
from tiered_core.configdef.__main__ import main as configdef_main
from tiered_core.configdef.types import OPTIONS
from tiered_core.errors import ConfigError
from tiered_core.flat import FlatFileConfig
from tiered_core.index.service import IndexConfig
from tiered_core.local.local_store import FlushMode, LocalStoreConfig
from tiered_core.segment import DEFAULT_MAX_BUFFER_COUNT, DEFAULT_MAX_SIZE

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tiered_core"
README = ROOT / "README.md"


# -- one declaration per key ---------------------------------------------------------------------


def _sources() -> dict[pathlib.Path, list[str]]:
    return {p: p.read_text(encoding="utf-8").splitlines() for p in sorted(PACKAGE.rglob("*.py"))}


def test_store_config_fields_are_the_declared_keys_in_order():
    names = [f.name for f in dataclasses.fields(StoreConfig)]
    assert names == KEYS.names() + ["source"]
    defaults = StoreConfig()
    for key in KEYS:
        assert getattr(defaults, key.name) == key.default, key


def test_each_key_is_declared_exactly_once():
    """The acceptance line: `grep -rn 'KEY' tiered_core` shows one ``Key("KEY", ...)``
    declaration, and no other declaration gives the name a literal default."""
    sources = _sources()
    for key in KEYS:
        declared = [f"{p.relative_to(ROOT)}:{n}" for p, lines in sources.items()
                    for n, line in enumerate(lines, 1) if re.search(rf'\bKey\(\s*"{key.name}"', line)]
        assert declared == [f"tiered_core/configdef/keys.py:{_line_of(key.name)}"], (key.name, declared)


def _line_of(name: str) -> int:
    lines = (PACKAGE / "configdef" / "keys.py").read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if f'Key("{name}"' in line)


#: Names that are also key names but mean something else there: (file, name).
_SAME_NAME_ELSEWHERE = {
    ("tiered_core/flat/ownership.py", "store_path"),  # the owner record: which store claimed the prefix
}
_LITERAL = re.compile(r"\s*(?:-?\d|[\"']|True\b|False\b|None\b|\{|\[|\(\s*-?\d)")


def test_no_other_declaration_repeats_a_default():
    """A dataclass field or an annotated parameter named after a key must take its default
    from the declaration (``KEYS.name.field()`` / ``KEYS.name.default``), not a literal."""
    found = []
    for path, lines in _sources().items():
        rel = str(path.relative_to(ROOT))
        if rel.startswith("tiered_core/configdef/"):
            continue
        for n, line in enumerate(lines, 1):
            for key in KEYS:
                for m in re.finditer(rf"\b{key.name}\s*:\s*[\w\[\]|., ]+?=(?!=)(.*)", line):
                    value = m.group(1).strip()
                    if value.startswith("None") and key.default is not None:
                        continue  # "no such object" (e.g. an optional driver instance), not a default
                    if _LITERAL.match(value) and (rel, key.name) not in _SAME_NAME_ELSEWHERE:
                        found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "defaults repeated outside the declaration:\n" + "\n".join(found)


def test_the_literal_check_would_catch_a_repeated_default():
    line = "    group_commit_size: int = 4 << 20"
    m = re.search(r"\bgroup_commit_size\s*:\s*[\w\[\]|., ]+?=(?!=)(.*)", line)
    assert m and _LITERAL.match(m.group(1))
    bound = "    group_commit_size: int = KEYS.group_commit_size.field()"
    m = re.search(r"\bgroup_commit_size\s*:\s*[\w\[\]|., ]+?=(?!=)(.*)", bound)
    assert m and not _LITERAL.match(m.group(1))


# -- the README table ------------------------------------------------------------------------------


def test_readme_key_table_is_generated_from_the_declaration():
    readme = README.read_text(encoding="utf-8")
    assert with_table(readme, markdown_table(KEYS, IGNORED_ROCKETMQ_KEYS)) == readme, (
        "README.md's config-key table differs from tiered_core/configdef/keys.py: run "
        "python -m tiered_core.configdef --update-readme README.md")
    for key in KEYS:
        assert f"`{key.env}`" in readme and (key.rocketmq is None or f"`{key.rocketmq}`" in readme)


def test_a_drifted_readme_fails_the_check(tmp_path):
    readme = README.read_text(encoding="utf-8")
    drifted = tmp_path / "README.md"
    # The declaration changes (a new default) and the README is not regenerated...
    keys = Keys(*(dataclasses.replace(k, default=8 << 20) if k.name == "group_commit_size" else k for k in KEYS))
    assert with_table(readme, markdown_table(keys, IGNORED_ROCKETMQ_KEYS)) != readme
    # ...or someone edits the generated table by hand.
    drifted.write_text(readme.replace("| `4MiB` |", "| `8MiB` |"), encoding="utf-8")
    assert configdef_main(["--check-readme", str(drifted)]) == 1
    assert configdef_main(["--update-readme", str(drifted)]) == 0
    assert drifted.read_text(encoding="utf-8") == readme
    assert configdef_main(["--check-readme", str(drifted)]) == 0
    drifted.write_text("no markers\n", encoding="utf-8")
    assert configdef_main(["--check-readme", str(drifted)]) == 2


# -- the broker.conf mapping and the environment ------------------------------------------------------


def test_broker_conf_tables_come_from_the_declaration():
    assert ROCKETMQ_KEYS == {k.rocketmq: (k.name, k.rocketmq_unit.convert if k.rocketmq_unit else None)
                             for k in KEYS if k.rocketmq and k.type is not OPTIONS}
    assert _ROCKETMQ_SWITCHES == {k.switch.rocketmq: (k.name, k.switch.off) for k in KEYS if k.switch}
    assert _ROCKETMQ_ROOT_KEYS == ("tieredStoreFilePath", "tieredStoreFilepath")
    assert ROCKETMQ_IGNORED_TIERED_KEYS == {k.rocketmq for k in IGNORED_ROCKETMQ_KEYS}


#: A valid value other than the default for each key, as an environment variable gives it,
#: and what the field then holds ("<cwd>" is the working directory).
ENV_SAMPLES = {
    "store_path": ("elsewhere", "<cwd>/elsewhere"),
    "driver": ("memory", "memory"),
    "metadata": ("json", "json"),
    "metadata_path": ("m.db", "<cwd>/m.db"),
    "cluster": ("c9", "c9"),
    "broker": ("b9", "b9"),
    "storage_level": ("force", "FORCE"),
    "commit_log_max_size": ("2MiB", 2 << 20),
    "consume_queue_max_size": ("2000", 2000),
    "max_group_commit_count": ("77", 77),
    "group_commit_count": ("64", 64),
    "group_commit_size": ("64k", 64 << 10),
    "group_commit_interval_ms": ("2s", 2000),
    "max_pending_limit": ("16", 16),
    "rolling_min_size": ("0", 0),
    "rolling_interval_ms": ("1h", 3_600_000),
    "file_reserved_hours": ("2d", 48),
    "read_ahead_cache_bytes": ("0", 0),
    "read_ahead_cache_expire_ms": ("2500", 2500),
    "read_ahead_disk_cache_path": ("cache", "<cwd>/cache"),
    "local_commit_log_file_size": ("64KiB", 64 << 10),
    "local_flush": ("SYNC_FLUSH", "sync"),
    "local_retention_hours": ("12", 12),
    "local_retention_interval_ms": ("5s", 5000),
    "metadata_recovery": ("rebuild", "rebuild"),
    "append_prop_crc": ("true", True),
    "verify_prop_crc": ("on", True),
}


def test_the_env_samples_cover_every_key():
    assert set(ENV_SAMPLES) == {k.name for k in KEYS if k.type is not OPTIONS}


@pytest.mark.parametrize("name", sorted(ENV_SAMPLES))
def test_each_key_has_its_environment_variable(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    key = KEYS[name]
    raw, expected = ENV_SAMPLES[name]
    if isinstance(expected, str):
        expected = expected.replace("<cwd>", str(tmp_path))
    base = StoreConfig.from_mapping({}, base_dir=str(tmp_path))
    cfg = base.with_env({key.env: raw})
    assert getattr(cfg, name) == expected != getattr(base, name)
    changed = {f.name for f in dataclasses.fields(StoreConfig)
               if f.name not in ("source", "driver_options") and getattr(cfg, f.name) != getattr(base, f.name)}
    assert changed == {name}
    with pytest.raises(ConfigError) as err:
        base.with_env({key.env: "\x00"})  # no key accepts a NUL
    assert err.value.key == name and key.env in str(err.value)


# -- every sub-config is built from the declaration, one way ------------------------------------------

BINDINGS = {
    FlatFileConfig: {"cluster": "cluster", "broker": "broker", "commit_log_max_size": "commit_log_max_size",
                     "consume_queue_max_size": "consume_queue_max_size",
                     "max_group_commit_count": "max_group_commit_count", "rolling_min_size": "rolling_min_size",
                     "rolling_interval_ms": "rolling_interval_ms", "file_reserved_hours": "file_reserved_hours"},
    LocalStoreConfig: {"commit_log_file_size": "local_commit_log_file_size", "flush_mode": "local_flush",
                       "file_reserved_time_ms": "local_retention_hours", "append_prop_crc": "append_prop_crc"},
    IndexConfig: {"reserved_hours": "file_reserved_hours"},
    DispatchConfig: {"group_commit_count": "group_commit_count", "group_commit_size": "group_commit_size",
                     "group_commit_interval_ms": "group_commit_interval_ms",
                     "max_pending_limit": "max_pending_limit"},
}


@pytest.mark.parametrize("cls", list(BINDINGS), ids=lambda c: c.__name__)
def test_sub_config_fields_are_bound_to_keys_and_default_to_them(cls):
    bound = bound_fields(cls)
    assert {name: key.name for name, (key, _) in bound.items()} == BINDINGS[cls]
    defaults = cls()
    for name, (key, convert) in bound.items():
        assert getattr(defaults, name) == (key.default if convert is None else convert(key.default))


def test_other_defaults_point_at_the_declaration():
    assert DEFAULT_MAX_SIZE[FileSegmentType.COMMIT_LOG] == KEYS.commit_log_max_size.default
    assert DEFAULT_MAX_SIZE[FileSegmentType.CONSUME_QUEUE] == KEYS.consume_queue_max_size.default
    assert DEFAULT_MAX_BUFFER_COUNT == KEYS.max_group_commit_count.default
    assert ReadAheadCache(1000).expire_s * 1000 == KEYS.read_ahead_cache_expire_ms.default


def test_a_store_builds_every_part_from_its_config(tmp_path, request):
    config = small_config(tmp_path, "memory", memory_options(request), cluster="c7", broker="b7",
                          commit_log_max_size=300 << 10, max_group_commit_count=321, rolling_interval_ms=5000,
                          file_reserved_hours=5, group_commit_count=33, group_commit_size=7777,
                          group_commit_interval_ms=1234, max_pending_limit=3, local_flush="sync",
                          local_retention_hours=2, append_prop_crc=True)
    with TieredMessageStore.open(config) as store:
        parts = {FlatFileConfig: store.flat_files.config, LocalStoreConfig: store.local.config,
                 IndexConfig: store.index.config, DispatchConfig: store.dispatcher.config}
        for cls, part in parts.items():
            for field_name, (key, convert) in bound_fields(cls).items():
                value = getattr(config, key.name)
                assert getattr(part, field_name) == (value if convert is None else convert(value)), field_name
        assert store.local.config.flush_mode is FlushMode.SYNC
        assert store.local.config.file_reserved_time_ms == 2 * 3_600_000
        assert store.local.config.max_message_size == min(16 << 20, (1 << 20) - 8, 300 << 10)


def test_dispatch_config_checks_its_values():
    with pytest.raises(ConfigError) as err:
        DispatchConfig(max_pending_limit=0)
    assert err.value.key == "max_pending_limit" and "int >= 1" in str(err.value)
    assert DispatchConfig(group_commit_size="1MiB").group_commit_size == 1 << 20


# -- max_pending_limit is honoured ----------------------------------------------------------------------


def _store_with_queues(tmp_path, request, queues: int, **overrides) -> TieredMessageStore:
    store = TieredMessageStore.open(small_config(tmp_path, "memory", memory_options(request), **overrides))
    for qid in range(queues):
        for i in range(3):
            store.put_message(Message(topic="T", body=b"q%d-%d" % (qid, i)), queue_id=qid)
    return store


def _count_uploads(store: TieredMessageStore, meet: int) -> dict[str, int]:
    """Wrap the dispatcher's group upload: count uploads in flight, and hold each until
    ``meet`` of them are in flight together (a barrier: no timing guess)."""
    seen = {"now": 0, "peak": 0, "uploads": 0}
    lock = threading.Lock()
    barrier = threading.Barrier(meet, timeout=30)
    upload = store.dispatcher._commit_group

    def counted(flat, stats):
        with lock:
            seen["now"] += 1
            seen["uploads"] += 1
            seen["peak"] = max(seen["peak"], seen["now"])
            first = seen["uploads"] <= meet
        try:
            if first:
                barrier.wait()  # the first `meet` uploads are in flight at the same time
            return upload(flat, stats)
        finally:
            with lock:
                seen["now"] -= 1

    store.dispatcher._commit_group = counted
    return seen


def test_uploads_in_flight_reach_the_limit_and_never_pass_it(tmp_path, request):
    with _store_with_queues(tmp_path, request, 12, max_pending_limit=3) as store:
        seen = _count_uploads(store, meet=3)
        assert store.dispatch(force=True).messages == 36
    assert seen["peak"] == 3 and seen["uploads"] == 12


def test_the_limit_is_not_capped_at_eight(tmp_path, request):
    # The store used to run at most 8 dispatch threads whatever the limit said.
    with _store_with_queues(tmp_path, request, 12) as store:  # default limit 2500
        seen = _count_uploads(store, meet=12)
        assert store.dispatch(force=True).messages == 36
    assert seen["peak"] == 12


def test_idle_queues_take_no_thread(tmp_path, request):
    with _store_with_queues(tmp_path, request, 12) as store:
        assert store.dispatch(force=True).messages == 36
        threads_before = store.dispatcher._pool._threads.copy()
        store.put_message(Message(topic="T", body=b"one more"), queue_id=5)
        stats = store.dispatch(force=True)
        assert (stats.messages, stats.queues) == (1, 12)
        assert store.dispatcher._pool._threads == threads_before  # an idle thread was reused
