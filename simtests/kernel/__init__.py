"""Kernel under a simulator against the oracle: the named case matrix, determinism, Hypothesis."""
