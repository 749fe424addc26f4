"""sglang-specgate: load-aware EAGLE speculative decoding for SGLang, as a plugin."""

__version__ = "0.1.0"
