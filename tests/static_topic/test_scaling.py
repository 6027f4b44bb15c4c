"""Static-topic admin work grows linearly with the number of logic queues (issue 18, finding 7).

Times are not compared (a shared machine makes them noisy; ``bench/static_topic.py --queues N``
measures them): the test counts the function calls -- Python and built-in -- that ``create``
and ``status`` make, which is deterministic. Four times the queues must cost about four
times the calls; the quadratic parts this replaced (a scan of every logic queue per logic
queue: the skipped offsets per queue in ``status``, the used physical queue ids per queue
in ``create``) made it about sixteen.
"""

from __future__ import annotations

import sys

from static_topic_helpers import broker_configs
from tiered_core.static_topic import Cluster


def calls(fn, *args) -> int:
    """How many Python and built-in function calls ``fn(*args)`` makes."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


def admin_calls(root, queues: int) -> dict[str, int]:
    configs = broker_configs(root)
    with Cluster.open(configs) as cluster:
        created = calls(cluster.create_static_topic, "orders", queues, ["a", "b", "c"])
    with Cluster.open(configs) as cluster:
        status = calls(cluster.static_topic_status, "orders")
        verify = calls(cluster.verify)
    return {"create": created, "status": status, "verify": verify}


def test_create_status_and_verify_are_linear_in_queues(tmp_path):
    small = admin_calls(tmp_path / "small", 300)
    large = admin_calls(tmp_path / "large", 1200)
    growth = {k: round(large[k] / small[k], 2) for k in small}
    assert all(g < 5 for g in growth.values()), (growth, small, large)
