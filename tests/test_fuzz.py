"""Fuzzing (issue 9): regression tests, one per bug the fuzzer found, each with the
minimal failing input. Every decoder, config loader and the metadata JSON reader must
answer hostile input with a TieredStoreError subclass, never another exception."""

from __future__ import annotations

import pytest

from tiered_core.errors import ConfigError, CorruptData, IllegalParam, MetadataError, StateConflict, TieredStoreError


# -- regressions: each minimal input the fuzzer found, and what it must raise now ------------------


def test_regression_segment_path_with_a_lone_surrogate_is_not_a_segment_path() -> None:
    # A listing of file names that are not UTF-8 (os.listdir's surrogateescape) gave
    # UnicodeEncodeError from md5_prefix; queue_path even built a path no backend can store.
    from tiered_core.codec import naming

    with pytest.raises(IllegalParam) as err:
        naming.parse_segment_path("212d6b50_DefaultC\ud800uster/broker-a/rmq_sys_INDEX/0/INDEX/f7efa")
    assert "not a segment path" in str(err.value)
    with pytest.raises(IllegalParam, match="lone surrogate"):
        naming.queue_path("b\udc80", "TopicTest", 0)
    with pytest.raises(IllegalParam, match="lone surrogate"):
        naming.cluster_dir("\ud800")
    assert naming.md5_prefix("cl\u00e9") == naming.cluster_dir("cl\u00e9")[:8]  # real non-ASCII names still work
