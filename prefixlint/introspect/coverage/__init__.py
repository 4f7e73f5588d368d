"""Construction coverage: which prefix-taking sites ran (sites) and the config variants
built to reach the rest (variants)."""
