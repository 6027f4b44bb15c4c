"""The background dispatcher says when the tier refuses its writes (load-and-faults drill s15 F4).

A posix tier on a full file system made every upload fail (``No space left on device``):
a synchronous ``dispatch()`` returned the error, but a store opened with
``background=True`` logged nothing while its un-tiered backlog grew from 298 to 6,433
messages in 40 s. Now the failing rounds are logged at once, again once a minute while the
errors stay the same, and one line says when the dispatcher copies again.
"""

from __future__ import annotations

import logging
import time

from store_faults import SPEC, flaky_of
from store_workload import small_config
from tiered_core import Message
from tiered_core.access.dispatcher import _ErrorLog
from tiered_core.access.tiered_store import TieredMessageStore

DISPATCH_LOG = "tiered_core.access.dispatcher"


def _wait(what, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_background_dispatcher_logs_rounds_the_tier_refuses_and_when_it_copies_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=DISPATCH_LOG)
    options = {"inner": "posix", "inner_options": {"root": str(tmp_path / "tier"), "fsync": False}}
    config = small_config(tmp_path, SPEC, options, group_commit_interval_ms=0)
    with TieredMessageStore.open(config, background=True) as store:
        faults = flaky_of(store.driver).faults
        faults.unavailable.add("write")  # the backend refuses every write (full, read-only, down)

        def failing() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == DISPATCH_LOG and "failing" in r.getMessage()]

        for i in range(20):
            store.put_message(Message(topic="orders", body=b"order %d" % i), 0)
        _wait(lambda: failing())
        assert "orders/0" in failing()[0] and "the backend refuses writes" in failing()[0], failing()
        time.sleep(3)  # more failed rounds (one a second): the same errors are not logged again
        assert len(failing()) == 1, failing()

        faults.unavailable.discard("write")
        _wait(lambda: any("copies again" in r.getMessage() for r in caplog.records if r.name == DISPATCH_LOG))
        _wait(lambda: store.get_message("g", "orders", 0, 19, 1).messages != [])


def test_the_same_errors_are_logged_again_after_a_minute_and_new_ones_at_once(caplog):
    caplog.set_level(logging.INFO, logger=DISPATCH_LOG)
    now = [0.0]
    errors = _ErrorLog(clock=lambda: now[0])

    def logged() -> int:
        return sum(1 for r in caplog.records if r.name == DISPATCH_LOG and "failing" in r.getMessage())

    errors.round(["q/0: full"])
    now[0] = 59.0
    errors.round(["q/0: full"])
    assert logged() == 1
    errors.round(["q/0: full", "q/1: full"])  # another queue fails: said at once
    assert logged() == 3
    now[0] = 119.5
    errors.round(["q/0: full", "q/1: full"])  # a minute after: said again
    assert logged() == 5
    assert "round 4 failing" in caplog.records[-1].getMessage()
    errors.round([])
    assert "copies again after 4 failed round(s)" in caplog.records[-1].getMessage()
    errors.round([])
    assert len(caplog.records) == 6
    errors.round([f"q/{i}: down" for i in range(25)])  # every queue fails: ten, and how many more
    assert [r.getMessage() for r in caplog.records[-2:]] == ["dispatch round 1 failing: q/9: down",
                                                             "dispatch round 1 failing: and 15 more queue(s)"]
