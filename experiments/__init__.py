"""T5-study sweeps: one paper table per module, each a `sweep(add)` (see launch/local.py)."""
