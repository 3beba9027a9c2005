"""Drafters propose tokens (a chain or a tree) for the target to verify in one pass."""
