"""Real architectures' configs and tensor layouts, one module per family.

Each public function returns a :class:`~mxtrim_tui.synth.checkpoint.Layout` whose
``config`` mirrors the released ``config.json`` and whose ``tensors`` carry the released
checkpoint's names, dtypes and shapes (optionally scaled down with keyword arguments).
"""
