"""Analyses: pure functions from the canonical events frame to declared output frames."""
