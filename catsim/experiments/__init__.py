"""Experiments: the only layer that both runs things and draws them."""
