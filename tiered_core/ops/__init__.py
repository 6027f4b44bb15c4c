"""Recovery and verification jobs over a store's tier: they use the container layer
(flat files, metadata, index) but belong to no single part of it.

- :mod:`tiered_core.ops.reconcile`: at open, compare the metadata with the backend listing.
- :mod:`tiered_core.ops.rebuild`: rebuild lost metadata from the backend listing.
- :mod:`tiered_core.ops.verify` (with ``verify_*``): check a tier end to end, read-only;
  :mod:`tiered_core.ops.findings` declares what it can find.
- :mod:`tiered_core.ops.repair` (with ``repair_*``) and :mod:`tiered_core.ops.quarantine`:
  mend what is safe, moving objects aside instead of deleting them.
"""
