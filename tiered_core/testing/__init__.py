"""Test support shared by the test suite, driver conformance environments and benchmarks."""
