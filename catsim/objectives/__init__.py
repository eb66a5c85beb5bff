"""catsim.objectives."""
