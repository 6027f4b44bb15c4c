"""Byte formats shared with RocketMQ: messages, consume-queue units, hashes, paths.

Pure functions over ``bytes``/``bytearray``/``memoryview``; stdlib only. Malformed
bytes raise :class:`~tiered_core.errors.CorruptData` naming the offset; bad arguments
raise :class:`~tiered_core.errors.IllegalParam` naming the argument.
"""

from tiered_core.codec import consume_queue, hashing, message, naming
from tiered_core.codec.consume_queue import *  # noqa: F401,F403
from tiered_core.codec.hashing import *  # noqa: F401,F403
from tiered_core.codec.message import *  # noqa: F401,F403
from tiered_core.codec.naming import *  # noqa: F401,F403

__all__ = [
    *message.__all__,
    *consume_queue.__all__,
    *hashing.__all__,
    *naming.__all__,
]
