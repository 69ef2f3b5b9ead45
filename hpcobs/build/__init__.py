"""The build: content to files (pipeline), validation by schemas and real tools, the cache, the atomic
publication of out/, the cardinality budget and timings."""
