"""Construction coverage: which prefix-taking sites ran (sites), the config variants
built to reach the rest (variants), a draft's per-layer lists for layers numbered on from
its target's (numbering), and the checkpoint dry-run of variants that add parameters
(variant_dryrun)."""
