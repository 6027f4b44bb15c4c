"""Read policy: which tier serves a read (RocketMQ's TieredStorageLevel)."""

from __future__ import annotations

import enum

from tiered_core.errors import ConfigError


class ReadPolicy(enum.IntEnum):
    """Levels are ordered: a level includes the checks of every lower one.

    DISABLE: never read the tiered store. NOT_IN_DISK (default): read it for offsets the
    local disk no longer holds. NOT_IN_MEM: also for offsets outside the local store's
    recent (in-memory) window. FORCE: always read it for what it has committed.
    """

    DISABLE = 0
    NOT_IN_DISK = 1
    NOT_IN_MEM = 2
    FORCE = 3

    @classmethod
    def parse(cls, value: "str | int | ReadPolicy") -> "ReadPolicy":
        if isinstance(value, ReadPolicy):
            return value
        try:
            if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
                return cls(int(value))
            return cls[str(value).strip().upper()]
        except (KeyError, ValueError):
            raise ConfigError(
                f"storage level {value!r} is not one of {', '.join(m.name for m in cls)} (or 0-3)",
                key="storage_level", value=value) from None

    def check(self, level: "ReadPolicy") -> bool:
        return self.value >= level.value
