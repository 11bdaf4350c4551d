"""Tests of the benchmark drivers in benchmarks/ (their input generators)."""
