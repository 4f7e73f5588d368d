"""Construction coverage: which prefix-taking sites ran (sites), the config variants
built to reach the rest (variants), and the checkpoint dry-run of those that add
parameters (variant_dryrun)."""
