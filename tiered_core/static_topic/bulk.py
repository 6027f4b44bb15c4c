"""Admin work over many logic queues at once: :func:`gc_paused`.

Creating, loading or reporting a static topic of 100,000 logic queues builds hundreds of
thousands of small acyclic objects (mapping items, their JSON dicts). Python's cyclic
garbage collector runs its full collection every time the number of surviving objects
grows by a quarter, and each one walks every live object: on that workload the collections
grew faster than the work (measured with ``bench/static_topic.py --queues 100000``: status
of 100,000 queues took 3.3 s of CPU with the collector, 1.5 s without; 10,000 queues
0.16 s either way). The admin operations therefore pause it while they build; reference
counting still frees everything that is dropped, and the collector runs again after.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_depth = 0  # nesting and concurrent callers: the collector is re-enabled by the last one out
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while the block runs (re-entrant, thread-safe: it
    is enabled again when the last block exits, and only if it was enabled before the first)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
