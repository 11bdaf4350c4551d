"""Tests of the interactive report: data preparation, plot structure, commands, a real browser."""
