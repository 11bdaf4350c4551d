"""Tests of timeline.execution and timeline.executors: rank-by-rank analysis, datasets, executors."""
