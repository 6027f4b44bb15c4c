"""Keeping a reused Spark Python worker's garbage collections to what its tasks create.

pyspark's daemon forks the Python workers that run tasks and planning calls, reuses each
for task after task, and runs a full ``gc.collect()`` after every one of them. A full
collection walks every tracked object of the process: pyspark, pyarrow, the backend's
client library (an s3 driver's client: about 71,000 tracked objects) and this
package's modules, which were loaded by the worker's first tasks and are never garbage.
Measured here (60 ``spark.read.format("tiered")`` counts of a posix store, local[2]): the
Python processes Spark started used 6.74 CPU-s (task workers 3.32, planning workers 3.05),
and 2.96 with :func:`freeze_survivors` (1.26 and 1.33); Spark's JVM 20 CPU-s either way.

:func:`freeze_survivors` moves every object alive now into the interpreter's permanent
generation (``gc.freeze()``), which later collections skip. It is called when a task or
planning call starts, and acts on the first :data:`FREEZES` calls of a process only: the
first freezes the modules that unpickling the task loaded, the second what the first task
left alive (the backend's client library, open clients, caches). In a worker the daemon
collected the earlier task's garbage before handing over the next task; in a process
where nobody collects between calls (a streaming query's source runner) a freeze can
also catch a reference cycle that is already garbage, and such an object then stays in
memory: two freezes early in the process's life bound that, where a freeze per call would
keep a little of every micro-batch for the life of a stream. Frozen objects are still freed
by reference counting.
"""

from __future__ import annotations

import gc
import os

#: How many calls of a process freeze what is alive (see the module's docstring).
FREEZES = 2
_pid, _calls = 0, 0  # the process that made _calls calls (a forked worker counts afresh)


def freeze_survivors() -> None:
    """On the first :data:`FREEZES` calls in this process, exempt every object alive now from
    later garbage collections (``gc.freeze()``: a constant-time move of the collector's
    lists); later calls do nothing. Never raises."""
    global _pid, _calls
    pid = os.getpid()
    if pid != _pid:
        _pid, _calls = pid, 0
    if _calls < FREEZES:
        _calls += 1
        gc.freeze()


__all__ = ["FREEZES", "freeze_survivors"]
