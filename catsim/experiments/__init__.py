"""Experiments: the only layer that both runs things and draws them (Fig. 2, theory figures, the LLM
pipeline and comparison, advise, and the reproduction check)."""
