"""The pytest side of the test kit: emulator fixtures that skip locally and fail in CI.

A driver distribution builds its emulator fixture with :func:`emulator_fixture` in its
own ``testing`` module (``tiered_driver_gcs.testing.fake_gcs``,
``tiered_driver_azure.testing.azurite``); a test suite opts in by importing the fixture
into its ``conftest.py``, the way ``pytest_plugins = "tox.pytest"`` opts into tox's kit::

    from tiered_driver_gcs.testing import GCS_BUCKET, fake_gcs  # noqa: F401  (fixture)

When an emulator cannot start, the tests using it are skipped with the reason, except
under ``CI=true``, where that is a failure: a backend's tests never silently skip in CI.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, TypeVar

import pytest

from tiered_conformance.emulator import Emulator, EmulatorError

E = TypeVar("E", bound=Emulator)


def ci_mode() -> bool:
    """Whether a missing emulator or backend must fail rather than skip (``CI=true``)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(what: str, exc: Exception | str) -> None:
    """Skip (locally) or fail (``CI=true``) because ``what`` is missing; says why."""
    message = f"{what} unavailable: {exc}"
    if ci_mode():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def start_or_skip(emulator: E, setup: Callable[[E], None] | None = None) -> E:
    """Start ``emulator`` (then ``setup`` it), or skip/fail the test via :func:`unavailable`."""
    try:
        emulator.start()
        if setup is not None:
            setup(emulator)
    except EmulatorError as exc:
        emulator.close()
        unavailable(emulator.name, exc)
    return emulator


def emulator_fixture(factory: Callable[[os.PathLike], E], setup: Callable[[E], None] | None = None, *,
                     name: str, doc: str,
                     after_module: Callable[[E], None] | None = None) -> Callable[..., Iterator[E]]:
    """A fixture named ``name``: ``factory(data_dir)`` started and ``setup``, closed at the end.

    One emulator per test session, on a free port, with its data under pytest's temporary
    directory. Without ``after_module`` it is a session fixture. With it, the fixture is
    module-scoped over that same one emulator, and ``after_module(server)`` runs when each
    test module that used it is done: e.g. to empty its buckets, so that every module starts
    on the state ``setup`` made, whatever the modules before it stored.
    """

    def start(tmp_path_factory: pytest.TempPathFactory) -> E:
        return start_or_skip(factory(tmp_path_factory.mktemp(name) / "data"), setup)

    if after_module is None:
        def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E]:
            server = start(tmp_path_factory)
            try:
                yield server
            finally:
                server.close()
        scope = "session"
    else:
        key: pytest.StashKey[E] = pytest.StashKey()

        def fixture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E]:
            server = request.config.stash.get(key, None)
            if server is None:  # the session's first module using it (or one after a failed start)
                server = start(tmp_path_factory)
                request.config.stash[key] = server
                request.config.add_cleanup(server.close)
            yield server
            after_module(server)
        scope = "module"

    fixture.__doc__ = doc
    fixture.__name__ = name
    return pytest.fixture(scope=scope, name=name)(fixture)


__all__ = ["ci_mode", "emulator_fixture", "start_or_skip", "unavailable"]
