"""The offset state machine (tests/offset_machine.py), bounded for `make test`.

``bench/offset_state_machine.py --steps 20000`` runs the same machine long.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from offset_machine import OffsetMachine

OffsetMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=25, deadline=None,
                                           suppress_health_check=list(HealthCheck))
TestOffsetMachine = OffsetMachine.TestCase
