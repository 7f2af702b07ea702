"""Synthetic checkpoints made of real files, for the tests and the benchmarks: real
safetensors headers at real shapes, with random bytes (small models) or sparse data
(full-size layouts at almost no disk cost). Not part of the installed product."""
