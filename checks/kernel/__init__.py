"""The kernel level (proves the kernel): the FlashInfer fork's K16/V8 wrappers against the torch reference."""
