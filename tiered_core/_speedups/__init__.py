"""The optional compiled core: C twins (Cython 3) of the hot tiered_core.codec functions.

Built by ``setup.py`` when Cython and a C compiler are there (``make`` installs Cython);
without them the install carries on and the pure-Python functions are used. Nothing
imports this package directly: :mod:`tiered_core.codec._impl` picks the compiled or the
pure function for each kernel (``TIERED_PURE_PYTHON=1`` forces pure Python) and binds
the extension to its oracles. It sits just below ``codec`` in the import layers and
imports nothing from tiered_core itself.

Each pure-Python function is the test oracle of its twin (``tests/test_speedups.py``):
equal results for valid input and, for bad input, the same exception (type, code,
message, offset, reason) or the same ``UnitCheck`` error at the same first bad unit. A
kernel only ever *accepts* in C: at the first doubtful byte, argument type or range it
hands the call -- or the rest of a batch, from the first doubtful unit -- to the oracle.

=========================  ==========================================  =========================================
kernel (``_core.``)        pure-Python oracle                          signature
=========================  ==========================================  =========================================
``check_units``            ``codec.checks.check_units``                ``(units, buf, buf_offset=None, *, topic,
                                                                       queue_id, queue_offset, verify_crc=True,
                                                                       prop_crc=IGNORE, check_tags=True)
                                                                       -> UnitCheck``
``decode_message``         ``codec.message.decode_message``            ``(buf, offset=0, *, verify_crc=True,
                                                                       base_offset=0) -> MessageExt``
``validate_message``       ``codec.message.validate_message``          ``(buf, offset=0, *, verify_crc=True,
                                                                       base_offset=0) -> int``
``peek_total_size``,       ``codec.message.peek_*``                    ``(buf, offset=0) -> int``
``peek_magic``,
``peek_queue_id``,
``peek_queue_offset``,
``peek_physical_offset``,
``peek_sys_flag``,
``peek_born_timestamp``,
``peek_store_timestamp``
``encode_message``         ``codec.message.encode_message``            ``(msg, *, queue_id, queue_offset,
                                                                       store_timestamp, physical_offset=0,
                                                                       store_host=DEFAULT_HOST, sys_flag=None,
                                                                       version=None, prop_crc=False) -> bytes``
``encode_cq_unit``         ``codec.consume_queue.encode_cq_unit``      ``(commitlog_offset, size, tags_code=0)
                                                                       -> bytes``
``encode_cq_units``        ``codec.consume_queue.encode_cq_units``     ``(units) -> bytes`` (a generator is read
                                                                       whole before the first unit is checked)
``decode_cq_units``        ``codec.consume_queue.decode_cq_units``     ``(buf, *, base_offset=0)
                                                                       -> list[ConsumeQueueUnit]``
``pack_item``              ``codec.tiered_index.pack_item``            ``(hash_code, topic_id, queue_id, offset,
                                                                       size, time_diff, item_index=0) -> bytes``
``java_crc32``             ``codec.prop_crc.java_crc32``               ``(buf, start=0, end=None) -> int``
=========================  ==========================================  =========================================

``_core.bind(namespace)`` hands the extension its oracles and value types (CorruptData,
MessageExt, ConsumeQueueUnit, UnitCheck...); ``codec._impl`` does it once.
"""
