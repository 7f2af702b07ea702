"""Synthetic checkpoints made of real files: real safetensors headers at real shapes,
with random bytes (small models) or sparse data (full-size layouts at almost no disk cost).

Used by the tests, the benchmarks and the bundled demo model.
"""
