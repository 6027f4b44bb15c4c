"""What third parties implement (drivers, metadata stores) or call (the access ABCs)."""

from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver, redact
from tiered_core.spi.hookspecs import hookimpl
from tiered_core.spi.layer import DriverLayer, RetryPolicy, layered

__all__ = ["Capabilities", "DriverLayer", "RetryPolicy", "SegmentDriver", "hookimpl", "layered", "redact"]
