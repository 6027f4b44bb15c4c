"""The pytest plugin of ``tiered_conformance`` (auto-loaded through ``pytest11``).

It adds the ``--tiered-*`` options and two fixtures, ``tiered_environment`` (session:
the options of a throw-away location from the driver plugin's
``tiered_conformance_environment`` hook, which may start an emulator, merged with
``--tiered-option`` values, which win) and ``tiered_driver`` (a driver
instance opened on it). The suite's ``driver`` fixture uses ``tiered_driver`` unless a
subclass of :class:`~tiered_conformance.DriverConformance` defines its own.

Without ``--tiered-driver`` the plugin does nothing to other projects' test runs: its
fixtures are ``tiered_``-prefixed and only requested by the suite, and collecting the
suite's own modules (``pytest --pyargs tiered_conformance``) stops with a usage error
asking for ``--tiered-driver NAME``.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

# The suite's assertions live in this package, not in test files: have pytest rewrite
# them so failures show compared values. Must run before tiered_conformance.suite loads.
pytest.register_assert_rewrite("tiered_conformance.suite", "tiered_conformance.faults")

from tiered_conformance.options import SuiteSettings, resolve_settings  # noqa: E402

_SETTINGS = pytest.StashKey[SuiteSettings]()
#: Modules collected by ``--pyargs tiered_conformance`` (they need --tiered-driver).
_SUITE_MODULE_PREFIX = "tiered_conformance.test_"

#: The module of the metadata store suite (it needs --tiered-metadata-store).
_METADATA_SUITE_MODULE = "tiered_conformance.test_metadata_store"

NO_DRIVER_MESSAGE = (
    "tiered_conformance: no driver selected: pass --tiered-driver NAME "
    "(a registered driver name, an alias, or module:Class), or subclass "
    "tiered_conformance.DriverConformance and define a `driver` fixture "
    "(for the metadata store suite: --tiered-metadata-store NAME)"
)
NO_METADATA_STORE_MESSAGE = (
    "tiered_conformance: no metadata store selected: pass --tiered-metadata-store NAME "
    "(a registered store name, an alias, or module:Class), or subclass "
    "tiered_conformance.MetadataStoreConformance and set `store_name`"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tiered", "tiered-store driver conformance suite")
    group.addoption("--tiered-driver", metavar="NAME", default=None,
                    help="driver to run the conformance suite against: registered name, alias or module:Class")
    group.addoption("--tiered-option", metavar="KEY=VALUE", action="append", default=[],
                    help="driver option (repeatable); overrides the driver's conformance environment")
    group.addoption("--tiered-capability", metavar="FIELD=VALUE[:REASON]", action="append", default=[],
                    help="override a declared capability for this run, e.g. an emulator gap (repeatable)")
    group.addoption("--tiered-hypothesis-examples", metavar="N", type=int, default=None,
                    help="examples for the stateful FileSegment test (default 40)")
    group.addoption("--tiered-metadata-store", metavar="NAME", default=None,
                    help="metadata store to run the metadata store suite against: registered name, alias "
                         "or module:Class")


def pytest_configure(config: pytest.Config) -> None:
    from tiered_core.errors import TieredStoreError

    try:
        settings = resolve_settings(
            config.getoption("tiered_driver"),
            config.getoption("tiered_option") or (),
            config.getoption("tiered_capability") or (),
            config.getoption("tiered_hypothesis_examples"),
            config.getoption("tiered_metadata_store"),
        )
    except TieredStoreError as exc:
        raise pytest.UsageError(f"tiered_conformance: {exc}") from exc
    config.stash[_SETTINGS] = settings


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(_SETTINGS, None)
    if settings is None or (settings.driver_cls is None and settings.metadata_store_cls is None):
        return None
    return f"tiered-conformance: {settings.describe()}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The suite's own modules run only for what was selected: the driver suite with
    ``--tiered-driver``, the metadata store suite with ``--tiered-metadata-store``. The
    other suite is deselected; with neither selected, collecting them is a usage error."""
    settings = config.stash.get(_SETTINGS, None) or SuiteSettings()
    driver_on = settings.driver_cls is not None
    store_on = settings.metadata_store_cls is not None
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__ if module is not None else ""
        if not name.startswith(_SUITE_MODULE_PREFIX):
            keep.append(item)
        elif store_on if name == _METADATA_SUITE_MODULE else driver_on:
            keep.append(item)
        elif driver_on or store_on:
            dropped.append(item)  # the other suite was asked for
        else:
            raise pytest.UsageError(NO_DRIVER_MESSAGE)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def suite_settings(config: pytest.Config) -> SuiteSettings:
    """The settings of this run (an empty one when the plugin is not active)."""
    return config.stash.get(_SETTINGS, None) or SuiteSettings()


@pytest.fixture(scope="session")
def tiered_environment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Options of a throw-away location for ``--tiered-driver`` (converted, user values win)."""
    settings = suite_settings(request.config)
    if settings.driver_cls is None:
        pytest.fail(NO_DRIVER_MESSAGE, pytrace=False)
    from tiered_core.plugins import get_registry

    cls = settings.driver_cls
    workdir = tmp_path_factory.mktemp("tiered-conformance")
    # The driver's plugin answers tiered_conformance_environment (e.g. starting its
    # emulator); otherwise the class's conformance_environment.
    with get_registry().conformance_environment(settings.driver_name, str(workdir)) as env:
        yield cls.coerce_options({**dict(env), **settings.options})


@pytest.fixture
def tiered_driver(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh instance of the ``--tiered-driver`` driver on the session's location."""
    settings = suite_settings(request.config)
    if settings.driver_cls is None:
        pytest.fail(NO_DRIVER_MESSAGE, pytrace=False)
    options = request.getfixturevalue("tiered_environment")
    drv = settings.driver_cls(**options)
    try:
        yield drv
    finally:
        drv.close()
