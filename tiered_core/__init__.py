"""tiered-store: tiered message storage, byte-compatible with RocketMQ 5 (RIP-65).

Layers (docs/ARCHITECTURE.md §2): drivers (``tiered_core.spi``, ``plugins``, the driver
distributions), the container layer (``segment``, ``flat``, ``metadata``, ``index``, with
``ops`` over it), the access layer (``access``, ``local``, ``static_topic``) and the tools
(``spark``, ``cli``); ``codec`` holds the byte formats every layer shares.

The public API::

    from tiered_core import TieredMessageStore, StoreConfig, Message, BoundaryType
    store = TieredMessageStore.open(StoreConfig.load("tiered.toml"))
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Imported on first use, so that `import tiered_core` (e.g. by a driver plugin, or the `tiered`
# command before it can report a Ctrl-C) stays light.
_LAZY = {
    "StoreConfig": "tiered_core.config",
    "hookimpl": "tiered_core.spi.hookspecs",
    "TieredMessageStore": "tiered_core.access.tiered_store",
    "Message": "tiered_core.codec.message",
    "MessageExt": "tiered_core.codec.message",
    "BoundaryType": "tiered_core.common",
    "GetMessageResult": "tiered_core.access.results",
    "GetMessageStatus": "tiered_core.access.results",
    "PutMessageResult": "tiered_core.access.results",
    "PutMessageStatus": "tiered_core.access.results",
    "QueryMessageResult": "tiered_core.access.results",
    "ReadPolicy": "tiered_core.access.policy",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered_core' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from tiered_core.config import StoreConfig
    from tiered_core.spi.hookspecs import hookimpl

__all__ = ["__version__", *_LAZY]
