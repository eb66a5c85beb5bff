"""catsim.theory."""
