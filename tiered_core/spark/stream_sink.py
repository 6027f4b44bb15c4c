"""Where ``datasource.py`` finds the streaming sink until its import names
:mod:`tiered_core.spark.sink` (the sources move to ``spark/source/`` in the same change)."""

from __future__ import annotations

from tiered_core.spark.sink import stream_writer

__all__ = ["stream_writer"]
