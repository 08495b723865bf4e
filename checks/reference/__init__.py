"""The reference level (proves the harness): a tiny seeded decoder on the torch reference, and its six checks."""
