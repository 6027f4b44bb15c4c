"""The container layer's flat files: segments stitched into per-queue logs."""

from tiered_core.flat.append_file import FlatAppendFile
from tiered_core.flat.commit_log_file import FlatCommitLogFile
from tiered_core.flat.settings import FlatFileConfig
from tiered_core.flat.consume_queue_file import FlatConsumeQueueFile
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile

__all__ = ["FlatAppendFile", "FlatCommitLogFile", "FlatConsumeQueueFile", "FlatFileConfig",
           "FlatFileStore", "FlatMessageFile"]
