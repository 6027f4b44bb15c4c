"""Recovery and verification jobs over a store's tier: they use the container layer
(flat files, metadata, index) but belong to no single part of it.

- :mod:`tiered_core.ops.reconcile`: at open, compare the metadata with the backend listing.
- :mod:`tiered_core.ops.rebuild`: rebuild lost metadata from the backend listing.
"""
