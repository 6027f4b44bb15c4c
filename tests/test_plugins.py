"""The plugin registry (tiered_core.plugins): entry points, broken plugins, lookup, options.

Broken plugins are tiny throw-away distributions written into a temporary directory
(a ``*.dist-info`` with ``entry_points.txt`` plus a module) and put on ``sys.path`` or
``PYTHONPATH``; nothing broken is ever installed into the venv.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid

import pytest

from tiered_core import hookimpl
from tiered_core.errors import ErrorCode, InvalidOption, PluginLoadError, UnknownDriver
from tiered_core.plugins import PluginLoadWarning, Registry, driver_class, get_registry, open_driver
from tiered_core.spi import Capabilities, SegmentDriver

FIRST_PARTY = {"memory": "tiered-driver-memory", "posix": "tiered-driver-posix"}
POSIX_CLASS = "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"
MEMORY_CLASS = "org.apache.rocketmq.tieredstore.provider.MemoryFileSegment"


# -- throw-away distributions ----------------------------------------------------------

def make_dist(root: pathlib.Path, dist: str, source: str | None, *, ep_name: str | None = None,
              version: str = "1.0", module: str | None = None) -> tuple[str, str]:
    """Write distribution ``dist`` into ``root``: metadata, a ``tiered_core`` entry point, a module.

    ``source=None`` writes no module (the entry point names a missing one). Returns
    ``(entry point name, module name)``; both are unique so no test sees another's
    module cached in ``sys.modules``.
    """
    suffix = uuid.uuid4().hex[:8]
    ep_name = ep_name or f"ep_{suffix}"
    module = module or f"tiered_test_plugin_{suffix}"
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[tiered_core]\n{ep_name} = {module}\n")
    if source is not None:
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return ep_name, module


GOOD_DRIVER = """
    from tiered_core import hookimpl
    from tiered_driver_memory import MemoryDriver

    class {cls}(MemoryDriver):
        name = {name!r}
        aliases = ({alias!r},)

    @hookimpl
    def tiered_register_drivers(register):
        register({cls})
"""

#: kind -> module source (None: the module does not exist)
BROKEN = {
    "import_error": "import tiered_no_such_dependency_7f3a  # a dependency that is not installed\n",
    "missing_module": None,
    "syntax_error": "def broken(:\n",
    "hook_raises": """
        from tiered_core import hookimpl

        @hookimpl
        def tiered_register_drivers(register):
            raise RuntimeError("backend SDK not configured")
    """,
    "not_a_driver": """
        from tiered_core import hookimpl

        @hookimpl
        def tiered_register_drivers(register):
            register(dict)
    """,
    "driver_without_name": """
        from tiered_core import hookimpl
        from tiered_core.spi import SegmentDriver

        @hookimpl
        def tiered_register_drivers(register):
            register(type("Nameless", (SegmentDriver,), {}))
    """,
    "unknown_hook": """
        from tiered_core import hookimpl

        @hookimpl
        def tiered_register_driverz(register):  # typo: no such hook
            pass
    """,
    "bad_hook_signature": """
        from tiered_core import hookimpl

        @hookimpl
        def tiered_register_drivers(registrar):  # the hook's argument is `register`
            pass
    """,
    "store_registered_by_name": """
        from tiered_core import hookimpl
        from tiered_core.metadata import JsonMetadataStore

        @hookimpl
        def tiered_register_metadata_stores(register):
            register("mine", JsonMetadataStore)  # the old shape: the class carries the name
    """,
    "store_without_name": """
        from tiered_core import hookimpl
        from tiered_core.spi.metadata import TieredMetadataStore

        @hookimpl
        def tiered_register_metadata_stores(register):
            register(type("Nameless", (TieredMetadataStore,), {}))
    """,
    "driver_registered_as_store": """
        from tiered_core import hookimpl
        from tiered_driver_memory import MemoryDriver

        @hookimpl
        def tiered_register_metadata_stores(register):
            register(MemoryDriver)
    """,
}


def broken_dist(root: pathlib.Path, kind: str) -> tuple[str, str]:
    dist = f"broken-{kind.replace('_', '-')}"
    ep_name, _ = make_dist(root, dist, BROKEN[kind])
    return dist, ep_name


@pytest.fixture
def plugin_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A directory on sys.path (first) for throw-away distributions."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("TIERED_STRICT_PLUGINS", raising=False)
    monkeypatch.delenv("TIERED_DISABLE_PLUGINS", raising=False)
    return root


# -- loading installed plugins ----------------------------------------------------------

def test_first_party_drivers_load_from_their_distributions():
    registry = Registry(strict=True).load()
    for name, dist in FIRST_PARTY.items():
        info = registry.drivers[name]
        assert info.distribution == dist
        assert info.version == md.version(dist)
        assert info.cls.name == name
    assert registry.failures == []


def test_example_sqlite_driver_is_found_by_entry_point_only():
    registry = Registry(strict=True).load()
    info = registry.drivers["sqlite"]
    assert info.distribution == "tiered-driver-sqlite"
    assert info.version == md.version("tiered-driver-sqlite")
    assert info.plugin == "sqlite"


def test_core_never_imports_a_driver_package():
    core = pathlib.Path(__import__("tiered_core").__file__).parent
    offenders = [
        f"{path.relative_to(core)}:{n}"
        for path in core.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith(("import tiered_driver", "from tiered_driver"))
    ]
    assert offenders == []


def test_third_party_distribution_registers_with_its_name_and_version(plugin_dir):
    make_dist(plugin_dir, "acme-tiered-driver", GOOD_DRIVER.format(cls="Acme", name="acme", alias="AcmeSegment"),
              version="2.3.1")
    registry = Registry(strict=True).load()
    info = registry.drivers["acme"]
    assert (info.distribution, info.version, info.aliases) == ("acme-tiered-driver", "2.3.1", ("AcmeSegment",))
    assert registry.driver_class("AcmeSegment") is info.cls
    # ...and the installed ones are still there
    assert set(FIRST_PARTY) <= set(registry.drivers)


# -- broken plugins -------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_reported_with_its_distribution_and_skipped(plugin_dir, kind):
    dist, ep_name = broken_dist(plugin_dir, kind)
    with pytest.warns(PluginLoadWarning, match=dist) as caught:
        registry = Registry().load()
    assert len(caught) == 1
    assert [(f.plugin, f.distribution) for f in registry.failures] == [(ep_name, dist)]
    assert registry.failures[0].error  # says what went wrong
    # The host goes on: every installed driver still works.
    assert set(FIRST_PARTY) <= set(registry.drivers)
    assert registry.open_driver("memory", namespace=f"t-{uuid.uuid4().hex}").size("a") == 0


def test_broken_plugin_does_not_hide_a_good_one_from_another_distribution(plugin_dir):
    dist, _ = broken_dist(plugin_dir, "import_error")
    make_dist(plugin_dir, "good-driver", GOOD_DRIVER.format(cls="Good", name="good", alias="GoodSegment"))
    with pytest.warns(PluginLoadWarning, match=dist):
        registry = Registry().load()
    assert registry.drivers["good"].distribution == "good-driver"
    assert [f.distribution for f in registry.failures] == [dist]


def test_unknown_driver_error_mentions_the_broken_distribution(plugin_dir):
    dist, _ = broken_dist(plugin_dir, "import_error")
    with pytest.warns(PluginLoadWarning):
        registry = Registry().load()
    with pytest.raises(UnknownDriver, match=dist):
        registry.driver_class("whatever-that-plugin-provided")


@pytest.mark.parametrize("kind", ["import_error", "unknown_hook", "hook_raises", "not_a_driver"])
def test_strict_mode_makes_a_broken_plugin_an_error(plugin_dir, kind):
    dist, ep_name = broken_dist(plugin_dir, kind)
    registry = Registry(strict=True)
    with pytest.raises(PluginLoadError) as err:
        registry.load()
    assert err.value.code is ErrorCode.PLUGIN_LOAD
    assert (err.value.distribution, err.value.plugin) == (dist, ep_name)
    assert dist in str(err.value) and "TIERED_STRICT_PLUGINS" in str(err.value)
    # Asking again must not hand out a half-loaded registry.
    with pytest.raises(PluginLoadError):
        registry.load()
    with pytest.raises(PluginLoadError):
        registry.driver_class("memory")


@pytest.mark.parametrize("value, strict", [("1", True), ("true", True), ("0", False), ("", False)])
def test_strict_mode_follows_the_environment(monkeypatch, value, strict):
    monkeypatch.setenv("TIERED_STRICT_PLUGINS", value)
    assert Registry().strict is strict


def _run_with_plugins(plugin_dir: pathlib.Path, code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_")}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")]))
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=120)


def test_strict_environment_variable_in_a_fresh_process(tmp_path):
    dist, _ = broken_dist(tmp_path, "import_error")
    code = "from tiered_core.plugins import open_driver; print(open_driver('memory').size('x'))"

    tolerant = _run_with_plugins(tmp_path, code)
    assert tolerant.returncode == 0, tolerant.stderr
    assert tolerant.stdout.strip() == "0"
    assert dist in tolerant.stderr and "skipped" in tolerant.stderr

    strict = _run_with_plugins(tmp_path, code, TIERED_STRICT_PLUGINS="1")
    assert strict.returncode != 0
    assert "PluginLoadError" in strict.stderr and dist in strict.stderr
    assert strict.stdout == ""


def test_disable_plugins_blocks_entry_points_by_name(plugin_dir, monkeypatch):
    _, ep_name = broken_dist(plugin_dir, "import_error")
    monkeypatch.setenv("TIERED_DISABLE_PLUGINS", f" posix , {ep_name} ")
    registry = Registry(strict=True).load()  # the broken plugin is never imported
    assert "posix" not in registry.drivers
    assert "memory" in registry.drivers
    assert registry.failures == []
    with pytest.raises(UnknownDriver):
        registry.driver_class(POSIX_CLASS)


# -- lookup by name, alias and module:Class -------------------------------------------------

@pytest.mark.parametrize("alias, name", [
    (POSIX_CLASS, "posix"),
    (MEMORY_CLASS, "memory"),
    ("PosixFileSegment", "posix"),
    ("MemoryFileSegment", "memory"),
])
def test_rocketmq_provider_class_names_are_aliases(alias, name):
    registry = Registry(strict=True).load()
    assert registry.canonical_name(alias) == name
    assert registry.driver_class(alias) is registry.drivers[name].cls


def test_open_driver_by_rocketmq_class_name(tmp_path):
    driver = open_driver(POSIX_CLASS, root=str(tmp_path / "r"))
    assert driver.name == "posix"
    driver.write("a/b", 0, b"xyz")
    assert (tmp_path / "r" / "a" / "b").read_bytes() == b"xyz"


class _Plugin:
    """An in-process plugin object providing the given driver classes."""

    def __init__(self, *classes: type[SegmentDriver]) -> None:
        self.classes = classes

    @hookimpl
    def tiered_register_drivers(self, register):
        for cls in self.classes:
            register(cls)


def _memory_subclass(name: str, aliases: tuple[str, ...] = ()) -> type[SegmentDriver]:
    base = Registry(strict=True).load().drivers["memory"].cls
    return type(f"Driver_{name}", (base,), {"name": name, "aliases": aliases})


def test_an_alias_never_shadows_a_real_driver_name():
    registry = Registry(strict=True).load()
    memory = registry.drivers["memory"].cls
    sneaky = _memory_subclass("sneaky", aliases=("memory", "sneaky-alias"))
    registry.register_plugin(_Plugin(sneaky), name="sneaky", distribution="sneaky-dist")
    assert registry.driver_class("memory") is memory
    assert registry.driver_class("sneaky-alias") is sneaky


def test_a_driver_name_two_plugins_claim_is_refused_for_both():
    """A driver drill: a package whose class was named ``posix`` took the name over when it
    came first on sys.path (the real driver was the one refused). The name is refused for
    both, whatever the order, and both are reported."""
    registry = Registry(strict=False).load()  # not TIERED_STRICT_PLUGINS, which CI sets
    impostor = _memory_subclass("posix")
    with pytest.warns(PluginLoadWarning, match="impostor-dist"):
        registry.register_plugin(_Plugin(impostor), name="impostor", distribution="impostor-dist")
    with pytest.raises(UnknownDriver, match="no driver named 'posix'.*tiered-driver-posix.*impostor-dist"):
        registry.driver_class("posix")
    assert {f.distribution for f in registry.failures} >= {"tiered-driver-posix", "impostor-dist"}
    assert all("refused for both" in f.error for f in registry.failures[-2:])


def test_an_alias_two_plugins_claim_is_refused_for_both():
    """A driver drill: a package declaring RocketMQ's ``PosixFileSegment`` as an alias took it
    over silently (the last loaded won), so a broker.conf selected the package's driver."""
    registry = Registry(strict=False).load()
    alias = "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"
    grabber = _memory_subclass("grabber", aliases=(alias,))
    with pytest.warns(PluginLoadWarning, match="grabber-dist"):
        registry.register_plugin(_Plugin(grabber), name="grabber", distribution="grabber-dist")
    with pytest.raises(UnknownDriver):
        registry.driver_class(alias)
    assert "grabber" not in registry.drivers and "posix" not in registry.drivers


def test_an_abstract_driver_class_is_refused_naming_what_it_lacks():
    """A driver drill: a class missing ``list`` was listed by `tiered drivers` and failed at
    open with a TypeError traceback reported as a bug of tiered-store."""
    registry = Registry(strict=False).load()

    class Partial(SegmentDriver):
        name = "partial"

        def size(self, path): return 0

    with pytest.warns(PluginLoadWarning, match=r"does not implement .*list"):
        registry.register_plugin(_Plugin(Partial), name="partial", distribution="partial-dist")
    assert "partial" not in registry.drivers


def test_a_plugin_that_registers_nothing_is_reported():
    """A driver drill: a hook that returned its class instead of calling register loaded
    silently, even in strict mode; the config then met only "no driver named ..."."""
    registry = Registry(strict=False).load()

    class Returns:
        @hookimpl
        def tiered_register_drivers(self, register):
            return [_memory_subclass("returned")]

    with pytest.warns(PluginLoadWarning, match="registered no class: call register"):
        registry.register_plugin(Returns(), name="returns", distribution="returns-dist")


def test_unknown_driver_lists_installed_drivers():
    registry = Registry(strict=True).load()
    with pytest.raises(UnknownDriver) as err:
        registry.open_driver("no-such-backend", root="/tmp/x")
    message = str(err.value)
    assert "'no-such-backend'" in message
    for name in [*FIRST_PARTY, "sqlite"]:
        assert name in message
        assert name in err.value.installed
    assert err.value.code is ErrorCode.UNKNOWN_DRIVER


def test_module_class_spec_loads_a_class_without_entry_point(plugin_dir):
    module = f"tiered_test_spec_{uuid.uuid4().hex[:8]}"
    (plugin_dir / f"{module}.py").write_text(textwrap.dedent("""
        from tiered_driver_memory import MemoryDriver

        class Unregistered(MemoryDriver):
            name = "unregistered"
    """))
    registry = Registry(strict=True).load()
    cls = registry.driver_class(f"{module}:Unregistered")
    assert cls.name == "unregistered" and "unregistered" not in registry.drivers
    driver = registry.open_driver(f"{module}:Unregistered", namespace=f"t-{uuid.uuid4().hex}")
    assert isinstance(driver.innermost, cls)  # in the standard layers
    # The module-level helpers take the same spec.
    assert driver_class("tiered_driver_posix:PosixDriver") is registry.drivers["posix"].cls


@pytest.mark.parametrize("spec, error", [
    ("tiered_no_such_module_9c1:Driver", UnknownDriver),
    ("tiered_driver_posix:NoSuchClass", UnknownDriver),
    ("tiered_core.errors:DriverError", InvalidOption),
])
def test_bad_module_class_spec_is_named(spec, error):
    with pytest.raises(error) as err:
        Registry(strict=True).load().driver_class(spec)
    assert spec in str(err.value)


def test_default_registry_is_shared_and_loaded():
    assert get_registry() is get_registry()
    assert set(FIRST_PARTY) <= set(get_registry().drivers)


# -- metadata stores: registered and looked up exactly like drivers -----------------------

GOOD_STORE = """
    from tiered_core import hookimpl
    from tiered_core.metadata import JsonMetadataStore

    class {cls}(JsonMetadataStore):
        name = {name!r}
        aliases = ({alias!r},)

    @hookimpl
    def tiered_register_metadata_stores(register):
        register({cls})
"""


def test_builtin_metadata_stores_are_registered_directly_not_by_entry_point():
    registry = Registry(entry_points=False).load()  # no entry point is read at all
    for name in ("sqlite", "json"):
        entry = registry.metadata_stores[name]
        assert (entry.distribution, entry.plugin) == ("tiered-core", "tiered_core.metadata")
        assert entry.version == md.version("tiered-core")
        assert entry.cls.name == name
    core_eps = [ep for ep in md.distribution("tiered-core").entry_points if ep.group == "tiered_core"]
    assert core_eps == []


def test_builtin_stores_cannot_be_disabled(monkeypatch):
    monkeypatch.setenv("TIERED_DISABLE_PLUGINS", "tiered_core.metadata,metadata")
    assert {"sqlite", "json"} <= set(Registry(strict=True).load().metadata_stores)


def test_third_party_metadata_store_registers_with_its_name_aliases_and_version(plugin_dir):
    make_dist(plugin_dir, "acme-metadata", GOOD_STORE.format(cls="AcmeStore", name="acme", alias="AcmeMetadataStore"),
              version="1.4.0")
    registry = Registry(strict=True).load()
    entry = registry.metadata_stores["acme"]
    assert (entry.distribution, entry.version, entry.aliases) == ("acme-metadata", "1.4.0", ("AcmeMetadataStore",))
    assert registry.metadata_store_class("AcmeMetadataStore") is entry.cls
    assert registry.canonical_metadata_store_name("AcmeMetadataStore") == "acme"
    assert {"sqlite", "json"} <= set(registry.metadata_stores)


def test_a_second_store_with_a_taken_name_is_reported_not_swapped_in(plugin_dir):
    dist_ep, _ = make_dist(plugin_dir, "impostor-metadata",
                           GOOD_STORE.format(cls="Impostor", name="sqlite", alias="ImpostorStore"))
    with pytest.warns(PluginLoadWarning, match="impostor-metadata"):
        registry = Registry().load()
    assert registry.metadata_stores["sqlite"].distribution == "tiered-core"
    assert "already registered by distribution 'tiered-core'" in registry.failures[-1].error


@pytest.mark.parametrize("alias, name", [
    ("org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore", "json"),
    ("DefaultMetadataStore", "json"),
])
def test_rocketmq_metadata_class_names_are_aliases_declared_by_the_store(alias, name):
    registry = Registry(strict=True).load()
    assert alias in registry.metadata_stores[name].aliases  # declared by the class, not by the core
    assert registry.canonical_metadata_store_name(alias) == name
    assert registry.metadata_store_class(alias) is registry.metadata_stores[name].cls


def test_rocketmq_aliases_are_declared_only_by_the_plugins():
    """The core holds no table of RocketMQ class names: each driver or store declares its own."""
    core = pathlib.Path(__import__("tiered_core").__file__).parent
    offenders = [
        str(path.relative_to(core)) for path in core.rglob("*.py")
        if path.name != "json_store.py"
        and any(f'"{n}' in path.read_text() or f'"org.apache.rocketmq.tieredstore.{k}.{n}"' in path.read_text()
                for k, n in (("provider", "PosixFileSegment"), ("provider", "MemoryFileSegment"),
                             ("metadata", "DefaultMetadataStore")))
    ]
    assert offenders == []


def test_metadata_store_module_class_spec_and_unknown_name():
    registry = Registry(strict=True).load()
    assert registry.metadata_store_class("tiered_core.metadata.json_store:JsonMetadataStore") is \
        registry.metadata_stores["json"].cls
    with pytest.raises(InvalidOption):
        registry.metadata_store_class("tiered_driver_memory:MemoryDriver")  # not a store
    with pytest.raises(UnknownDriver) as err:
        registry.metadata_store_class("redis")
    assert "no metadata store named 'redis'" in str(err.value)
    assert {"sqlite", "json"} <= set(err.value.installed)


# -- the conformance environment hook --------------------------------------------------------

class _EnvironmentPlugin:
    """Answers tiered_conformance_environment for one driver name and records the calls."""

    def __init__(self, answers_for: str) -> None:
        self.answers_for = answers_for
        self.calls: list[tuple[str, str]] = []

    @hookimpl
    def tiered_conformance_environment(self, driver_name, workdir):
        self.calls.append((driver_name, workdir))
        if driver_name != self.answers_for:
            return None
        import contextlib

        return contextlib.nullcontext({"count": 7, "label": workdir})


def test_hook_tiered_conformance_environment_answers_by_registered_name(tmp_path):
    typed = type("AliasedTyped", (TypedDriver,), {"name": "aliased-typed", "aliases": ("TypedAlias",)})
    registry = Registry(entry_points=False).load()
    plugin = _EnvironmentPlugin("aliased-typed")
    registry.register_plugin(_Plugin(typed), name="typed")
    registry.register_plugin(plugin, name="typed-env")
    with registry.conformance_environment("TypedAlias", str(tmp_path)) as options:
        assert options == {"count": 7, "label": str(tmp_path)}
    assert plugin.calls == [("aliased-typed", str(tmp_path))]  # the alias is resolved first


def test_without_an_answer_the_driver_class_fallback_is_used(tmp_path):
    registry = Registry(strict=True).load()
    registry.register_plugin(_EnvironmentPlugin("somebody-else"), name="other-env")
    with registry.conformance_environment("posix", str(tmp_path)) as options:
        assert options == {"root": str(tmp_path / "posix-root")}
    with registry.conformance_environment("tiered_driver_memory:MemoryDriver", str(tmp_path)) as options:
        assert set(options) == {"namespace"}


def test_opening_drivers_never_loads_the_test_kit(tmp_path):
    """Emulator launchers and fixtures are test tooling: loading every plugin and opening the
    drivers (as a broker does) imports neither them nor tiered_conformance nor pytest."""
    code = textwrap.dedent(f"""
        import sys
        from tiered_core.plugins import get_registry, open_driver
        registry = get_registry()
        assert {{"gcs", "azure", "memory", "posix"}} <= set(registry.drivers), sorted(registry.drivers)
        open_driver("posix", root={str(tmp_path / "p")!r}).close()
        open_driver("memory").close()
        open_driver("gcs", bucket="some-bucket", token="anon", endpoint="http://127.0.0.1:9").close()
        open_driver("azure", container="c", connection_string="UseDevelopmentStorage=true").close()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tiered_conformance", "pytest", "_pytest")
                        or m.endswith((".emulator", ".testing")))
        print(loaded)
    """)
    out = _run_with_plugins(tmp_path, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_hook_is_documented_in_the_readme(repo_root):
    """datasette's meta-test: each hookspec appears in README's "Writing a driver" with its arguments."""
    from tiered_core.spi import hookspecs

    readme = (repo_root / "README.md").read_text()
    section = readme[readme.index("## Writing a driver"):]
    registry = Registry(entry_points=False).load()
    for name in (n for n in dir(hookspecs) if n.startswith("tiered_")):
        args = ", ".join(getattr(registry.pm.hook, name).spec.argnames)
        assert f"{name}({args})" in section, f"README's 'Writing a driver' does not document {name}({args})"


# -- options --------------------------------------------------------------------------

def test_unknown_option_is_named_and_nothing_is_created(tmp_path):
    root = tmp_path / "never"
    with pytest.raises(InvalidOption) as err:
        open_driver("posix", root=str(root), fsynk="false")
    assert err.value.option == "fsynk"
    assert "'fsynk'" in str(err.value) and "fsync" in str(err.value) and "root" in str(err.value)
    assert not root.exists()


def test_missing_required_option_is_named():
    with pytest.raises(InvalidOption) as err:
        open_driver("posix")
    assert err.value.option == "root" and "root" in str(err.value)


class TypedDriver(SegmentDriver):
    """Options of every supported type; does nothing else."""

    name = "typed"
    capabilities = Capabilities()
    secret_options = frozenset({"pin"})

    def __init__(self, *, count: int = 1, ratio: float = 0.5, flag: bool = False,
                 limit: int | None = None, label: str = "x", pin: int = 0) -> None:
        self.values = dict(count=count, ratio=ratio, flag=flag, limit=limit, label=label, pin=pin)

    size = exists = create = write = read = seal = delete = list = lambda self, *a: None


@pytest.fixture
def typed_registry() -> Registry:
    registry = Registry(entry_points=False).load()
    registry.register_plugin(_Plugin(TypedDriver), name="typed")
    return registry


def test_string_options_are_converted_by_annotation(typed_registry):
    driver = typed_registry.open_driver("typed", count="42", ratio="0.25", flag="yes", limit="none",
                                        label="007", pin="1234")
    assert driver.innermost.values == dict(count=42, ratio=0.25, flag=True, limit=None, label="007", pin=1234)
    assert typed_registry.open_driver("typed", limit="7", flag="off").innermost.values["limit"] == 7
    # Values that already have a type are passed through.
    assert typed_registry.open_driver("typed", count=3).innermost.values["count"] == 3


@pytest.mark.parametrize("option, value, expected", [
    ("count", "many", "int"),
    ("ratio", "half", "float"),
    ("flag", "maybe", "bool"),
    ("limit", "lots", "int"),
])
def test_option_type_errors_name_option_type_and_value(typed_registry, option, value, expected):
    with pytest.raises(InvalidOption) as err:
        typed_registry.open_driver("typed", **{option: value})
    assert err.value.option == option
    message = str(err.value)
    assert f"'{option}'" in message and expected in message and repr(value) in message


def test_option_type_error_does_not_show_a_secret_value(typed_registry):
    with pytest.raises(InvalidOption) as err:
        typed_registry.open_driver("typed", pin="s3cr3t-value")
    assert err.value.option == "pin"
    assert "s3cr3t-value" not in str(err.value) and "***" in str(err.value)


def test_real_drivers_convert_their_options(tmp_path):
    assert open_driver("posix", root=str(tmp_path / "p"), fsync="false").innermost.fsync is False
    sqlite = open_driver("sqlite", database=str(tmp_path / "s.db"), chunk_size="4096")
    assert sqlite.innermost.chunk_size == 4096
    sqlite.close()
    with pytest.raises(InvalidOption) as err:
        open_driver("sqlite", database=str(tmp_path / "s.db"), chunk_size="4k")
    assert err.value.option == "chunk_size"


def test_an_entry_point_name_two_distributions_declare_loads_neither(plugin_dir, monkeypatch):
    """A driver drill: a package whose entry point was named ``posix`` (the line copied from
    an example) hid the real posix driver without a word, even in strict mode (or was hidden
    by it: whichever came first on sys.path won)."""
    make_dist(plugin_dir, "acme-clash", GOOD_DRIVER.format(cls="Acme", name="acme", alias="AcmeSegment"),
              ep_name="posix")
    with pytest.warns(PluginLoadWarning, match="declared by distributions"):
        registry = Registry().load()
    assert "acme" not in registry.drivers and "posix" not in registry.drivers
    assert {f.distribution for f in registry.failures if f.plugin == "posix"} == {"acme-clash", "tiered-driver-posix"}
    monkeypatch.setenv("TIERED_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="declared by distributions"):
        Registry().load()
