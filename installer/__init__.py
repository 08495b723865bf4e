"""october: provision a pinned K16/V8 (asymmetric KV cache) vLLM + FlashInfer stack."""

__version__ = "0.1.0"
