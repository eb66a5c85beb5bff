"""catsim.llm."""
