"""pytest plugin (placeholder)."""
