"""The declaration of every config key, and the machinery made from it.

:data:`KEYS` (in :mod:`tiered_core.configdef.keys`) declares each key once; :class:`Key`,
the value types and :func:`section` live beside it. This package imports nothing of
tiered_core above ``errors`` and ``common``, so every layer may read defaults from it
(see the import-linter contract in pyproject.toml); :mod:`tiered_core.config` builds
``StoreConfig`` on top of it.
"""

from tiered_core.configdef.key_spec import (
    README_BEGIN,
    README_END,
    IgnoredKey,
    Key,
    Keys,
    Switch,
    bound_fields,
    markdown_table,
    section,
    with_table,
)
from tiered_core.configdef.keys import IGNORED_ROCKETMQ_KEYS, KEYS, NEVER_EXPIRE_HOURS, ROCKETMQ_DRIVER_OPTION_KEYS
from tiered_core.configdef.types import (
    HOUR_MS,
    LOCAL_FLUSH_MODES,
    METADATA_RECOVERY_MODES,
    STORAGE_LEVELS,
    RocketMQUnit,
    ValueType,
    parse_bool,
    parse_duration_ms,
    parse_size,
)

__all__ = [
    "KEYS", "IGNORED_ROCKETMQ_KEYS", "NEVER_EXPIRE_HOURS", "ROCKETMQ_DRIVER_OPTION_KEYS", "Key", "Keys", "IgnoredKey", "Switch", "ValueType",
    "RocketMQUnit", "section", "bound_fields", "markdown_table", "with_table", "README_BEGIN", "README_END",
    "parse_size", "parse_duration_ms", "parse_bool", "STORAGE_LEVELS", "LOCAL_FLUSH_MODES",
    "METADATA_RECOVERY_MODES", "HOUR_MS",
]
