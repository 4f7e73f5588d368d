"""``prefixlint zoo``: every architecture of the installed registry built and summarised
(run), and docs/zoo.md across releases (versions)."""
