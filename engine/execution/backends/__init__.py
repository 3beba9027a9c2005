"""Backends: a model plus its KV cache. `base.Backend` is the interface decoding relies on."""
