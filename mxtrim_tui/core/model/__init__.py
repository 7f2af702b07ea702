"""Stage 2, model: what the files describe — submodels, per-layer kinds, groups, quantization; family knowledge as data (``families``)."""
