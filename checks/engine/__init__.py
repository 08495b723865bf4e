"""The engine level (proves the stack): the vLLM fork with the downloaded model, K16/V8 on FlashInfer."""
