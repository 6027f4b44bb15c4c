"""The reading side of ``tiered_core.spark``: the ``tiered`` data source and its readers.

- :mod:`.datasource` -- :class:`~.datasource.TieredDataSource` (format ``tiered``), which picks a reader;
- :mod:`.options` -- every option declared once (:data:`~.options.OPTIONS`) and their parsing;
- :mod:`.batch` -- ``spark.read`` of a store; :mod:`.static_batch` -- of a static topic;
- :mod:`.queue_stream` -- the stream reader skeleton keyed by queue, with its two variants
  :mod:`.stream` (a store's queues) and :mod:`.static_stream` (a static topic's logic queues);
- :mod:`.stream_offsets` -- queue views planned from metadata, offsets, the fair share of a trigger;
- :mod:`.schema` and :mod:`.arrow_rows` -- the row schema and the one Arrow builder.

Nothing here imports the sink or the jobs, except :meth:`~.datasource.TieredDataSource.streamWriter`,
which hands ``writeStream.format("tiered")`` to :mod:`tiered_core.spark.sink`.
"""
