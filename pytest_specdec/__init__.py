"""pytest-specdec: speculative-decoding benchmarks as pytest tests."""

__version__ = "0.1.0"
