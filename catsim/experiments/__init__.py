"""Experiments: runs that combine the library layers, and checks of their results."""
