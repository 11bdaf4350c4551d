"""Writers of synthetic traces that copy real writers' layouts, for tests and benchmarks."""
