"""Helpers of the Spark tests: config files with small segments, and rows read three ways
(flat API, Spark, Parquet) in one comparable form."""

from __future__ import annotations


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path, store_path, *, driver: str = "posix", options: dict | None = None,
                 metadata_path: str | None = None, cl_max: int = 16 << 10, cq_max: int = 2000) -> str:
    """A tiered.toml with small segments (so stores have several sealed segments per queue)."""
    lines = ["[tiered]", f"store_path = {_toml_value(str(store_path))}", f"driver = {_toml_value(driver)}",
             f"commit_log_max_size = {cl_max}", f"consume_queue_max_size = {cq_max}"]
    if metadata_path:
        lines.append(f"metadata_path = {_toml_value(str(metadata_path))}")
    lines.append("[tiered.options]")
    for key, value in (options if options is not None else {"fsync": False}).items():
        lines.append(f"{key} = {_toml_value(value)}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def api_rows(config_path: str) -> list[tuple]:
    """Every message the flat API serves, as comparable row tuples (times in ms), in queue order."""
    from tiered_core.codec.message import decode_message
    from tiered_core.config import StoreConfig
    from tiered_core.flat import FlatFileStore

    config = StoreConfig.load(config_path)
    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        store = FlatFileStore(driver, metadata, config.flat_config())
        assert store.load(), store.failures
        rows = []
        for flat in sorted(store.files(), key=lambda f: (f.topic, f.queue_id)):
            for offset in range(flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()):
                rows.append(message_row(decode_message(flat.get_message(offset))))
        store.shutdown()
        return rows
    finally:
        metadata.close()
        driver.close()


def message_row(m) -> tuple:
    return (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.store_timestamp, m.born_timestamp,
            tuple(m.keys), m.tags, tuple(sorted(m.properties.items())), bytes(m.body))


def row_tuple(r: dict) -> tuple:
    """A row of the tiered schema (times in ms) in :func:`message_row` form."""
    props = r["properties"] or {}
    items = props.items() if isinstance(props, dict) else props
    return (r["topic"], r["queue_id"], r["queue_offset"], r["commitlog_offset"], r["store_timestamp"],
            r["born_timestamp"], tuple(r["keys"] or ()), r["tags"], tuple(sorted(items)), bytes(r["body"]))


def parquet_rows(path: str) -> list[tuple]:
    """An export read back with pyarrow (hive topic directories), sorted like :func:`api_rows`."""
    import pyarrow.dataset as ds

    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    rows = [row_tuple(r) for batch in table.to_batches() for r in batch_rows(batch)]
    return sorted(rows, key=lambda t: (t[0], t[1], t[2]))


def batch_rows(batch):
    """Rows of an Arrow batch of the tiered schema as dicts; timestamps as epoch milliseconds."""
    import pyarrow as pa

    names = batch.schema.names
    cols = {}
    for name in names:
        col = batch.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
            cols[name] = [None if v is None else v // 1000 for v in col.to_pylist()]
        else:
            cols[name] = col.to_pylist()
    for i in range(batch.num_rows):
        yield {name: cols[name][i] for name in names}


def messages_to_batch(messages, schema=None):
    """An independent reference of the Arrow builder: one row per decoded ``MessageExt``, built
    from its Python fields (times in ms -> us UTC)."""
    import pyarrow as pa

    from tiered_core.spark.source.schema import arrow_schema

    schema = schema if schema is not None else arrow_schema()
    columns = [
        [m.topic for m in messages],
        [m.queue_id for m in messages],
        [m.queue_offset for m in messages],
        [m.commitlog_offset for m in messages],
        [m.store_timestamp * 1000 for m in messages],
        [m.born_timestamp * 1000 for m in messages],
        [m.keys for m in messages],
        [m.tags for m in messages],
        [list(m.properties.items()) for m in messages],
        [m.body for m in messages],
    ]
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
