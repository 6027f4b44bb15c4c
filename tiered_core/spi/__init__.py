"""What third parties implement (drivers, metadata stores) or call (the access ABCs)."""

from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver, redact
from tiered_core.spi.hookspecs import hookimpl

__all__ = ["Capabilities", "SegmentDriver", "hookimpl", "redact"]
