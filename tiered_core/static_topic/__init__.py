"""Static topics (seed 002, RIP-21): logic queues over physical queues on several brokers.

A static topic has a fixed number of logic queues; each is a stack of physical queues in
time (generations), each generation on one broker. The shared tiered backend keeps old
generations readable after their broker was remapped away, drained or removed.
"""

from tiered_core.static_topic.cluster import Cluster
from tiered_core.static_topic.cluster_config import cluster_configs_from_text, load_cluster_configs
from tiered_core.static_topic.mapping_check import Violation
from tiered_core.static_topic.topic_view import read_static_topic_items
from tiered_core.static_topic.topic_errors import DirectPutRefused, UnknownStaticTopic
from tiered_core.static_topic.guard import DirectPutGuard, refuse_direct_puts
from tiered_core.static_topic.mapping import LogicQueueMappingItem, TopicQueueMappingDetail
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore
from tiered_core.static_topic.tiered_broker_reader import ReadOnlyDriver, TieredBrokerReader
from tiered_core.static_topic.topic_config import TopicConfig, TopicConfigStore

__all__ = ["Cluster", "Violation", "cluster_configs_from_text", "load_cluster_configs", "read_static_topic_items", "LogicQueueMappingItem", "TopicQueueMappingDetail",
           "ReadOnlyDriver", "TieredBrokerReader", "TopicQueueMappingStore", "TopicConfig", "TopicConfigStore",
           "DirectPutRefused", "UnknownStaticTopic", "DirectPutGuard", "refuse_direct_puts"]
