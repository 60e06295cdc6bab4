"""Tests of the harness, the case matrix, the inputs, the report writers and the CLI."""
