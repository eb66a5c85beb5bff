"""catsim.plots."""
