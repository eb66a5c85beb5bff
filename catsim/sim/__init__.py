"""catsim.sim."""
