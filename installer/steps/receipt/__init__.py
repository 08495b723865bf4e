"""Step ``receipt``: ``STACK/receipts/setup.json``."""
