"""tiered-store: tiered message storage, byte-compatible with RocketMQ 5 (RIP-65).

Layers (DESIGN.md): drivers (``tiered_core.spi``, plugins), the container layer
(``segment``, ``flat``, ``metadata``) and the access layer (``access``).
"""

from tiered_core.spi.hookspecs import hookimpl
from tiered_core.config import StoreConfig

__version__ = "0.1.0"

__all__ = ["hookimpl", "StoreConfig", "__version__"]
