"""Verified wheels to an index and a release: the index, its readers, the release's jobs."""
