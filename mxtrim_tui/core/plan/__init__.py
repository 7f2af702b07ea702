"""Stage 3, plan: a selection of layers turned into a trim plan — config rewrite, coverage, mapping — and its disk and GPU memory budget."""
