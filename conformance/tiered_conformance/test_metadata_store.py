"""Collected by ``pytest --pyargs tiered_conformance --tiered-metadata-store NAME``."""

from tiered_conformance.suite.metadata import MetadataStoreConformance


class TestMetadataStore(MetadataStoreConformance):
    """The metadata store contract, against the ``--tiered-metadata-store`` store."""
