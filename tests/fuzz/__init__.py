"""Fuzz tests: generated, then damaged, Kineto and Horovod traces (issue #19, docs/fuzzing.md)."""
