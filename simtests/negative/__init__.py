"""Negative tests: every bad input the kernel, the oracle and the CLI can receive gets its named error."""
