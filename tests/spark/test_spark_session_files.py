"""The checkout's list of the test files that share the run's SparkSession is true."""

from __future__ import annotations

from pathlib import Path


def test_every_file_using_the_spark_fixture_is_listed_as_a_spark_session_file(request):
    root = Path(str(request.config.rootpath))
    checkout = request.config.pluginmanager.get_plugin(str(root / "conftest.py"))
    users = {Path(str(item.path)).resolve().relative_to(root).as_posix()
             for item in request.session.items if "spark" in getattr(item, "fixturenames", ())}
    listed = set(checkout.SPARK_SESSION_FILES)
    assert users - listed == set(), "add these files to SPARK_SESSION_FILES in conftest.py"
    every_file = {Path(str(item.path)).resolve().relative_to(root).as_posix() for item in request.session.items}
    # a listed file that no longer uses the session only costs balance; one that is gone is stale
    assert {f for f in listed if (root / f).exists() and f in every_file} - users == set(), \
        "these listed files do not use the spark fixture: remove them from SPARK_SESSION_FILES"
