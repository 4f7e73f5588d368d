"""Phase 2 in the review flow, without a build: ``--diff-base`` semantics for run-time
findings, the review of a finding off the diff, one finding per site across phases,
statement spans, ``check --also`` and ``review --payload``. (The whole flow with a real
build: ``tests/test_action.py::test_action_runs_phase_2_on_a_model_pull_request``.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from prefixlint.check_introspect import (
    UNTHREADED,
    architectures_in,
    innermost,
    one_per_site,
    polish,
    statement_spans,
)
from prefixlint.diagnostic import Diagnostic, Position, Severity
from prefixlint.diffbase import ChangedLines
from prefixlint.review import OFF_DIFF_HEADING, build_review, worth_posting
from prefixlint.rules.pfx501_pp_interface_incomplete import ABOUT_THE_METHOD
from tests.test_diffbase import BUG_LINE, BUGGY_MODEL, git, invoke

pytest_plugins = ["tests.github_api"]  # the `github` fixture


def finding(
    code: str, file: Path, row: int, end: int | None = None, phase: str = "introspect", **data
) -> Diagnostic:
    severity = Severity.NOTE if code == "PFX600" else Severity.ERROR
    return Diagnostic(
        code,
        f"{code} says so",
        severity,
        str(file),
        Position(row, 1),
        Position(end or row, 1),
        phase=phase,
        data=data,
    )


def changes_in(root: Path, lines: dict[str, set[int]]) -> ChangedLines:
    return ChangedLines(root=root.resolve(), base="b" * 40, head="h" * 40, lines=lines)


def test_run_time_findings_of_a_changed_file_are_kept_wherever_they_are(tmp_path: Path) -> None:
    model, other = tmp_path / "m.py", tmp_path / "other.py"
    changes = changes_in(tmp_path, {"m.py": {10}})
    static_off = finding("PFX302", model, 20, phase="static")
    static_on = finding("PFX302", model, 9, 11, phase="static")
    runtime_off = finding("PFX601", model, 30)
    elsewhere = finding("PFX601", other, 10)
    kept = changes.filter([static_off, static_on, runtime_off, elsewhere], cwd=tmp_path)
    assert kept == [static_on, runtime_off]


def test_review_comments_on_the_span_and_lists_what_is_off_the_diff(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text("x = 1\n" * 40)
    changes = changes_in(tmp_path, {"m.py": {12}})
    on_span = finding("PFX601", model, 10, 13)  # a statement from row 10 to 13
    off = finding("PFX601", model, 30)
    note = finding("PFX600", model, 31)
    payload = build_review([on_span, off, note], changes, cwd=tmp_path)
    assert [(c["path"], c["line"]) for c in payload["comments"]] == [("m.py", 12)]
    assert OFF_DIFF_HEADING in payload["body"] and "`m.py:30` **PFX601**" in payload["body"]
    assert "m.py:31" not in payload["body"]  # a note off the diff is SARIF's, not the review's
    assert "2 findings in the files changed" in payload["body"]
    assert worth_posting(payload)
    only_off = build_review([off], changes, cwd=tmp_path)
    assert only_off["comments"] == [] and worth_posting(only_off)
    assert not worth_posting(build_review([note], changes, cwd=tmp_path))
    # A "not verified" note on a changed line is no comment either (issue 30): the body
    # says it was not posted, and its counts add up to the comments.
    on_line = finding("PFX600", model, 12)
    payload = build_review([on_line, on_span], changes, cwd=tmp_path)
    assert [c["line"] for c in payload["comments"]] == [12]
    assert "PFX600" not in str(payload["comments"]) and "1 finding in" in payload["body"]
    assert '1 "not verified" note on the files changed' in payload["body"]


MODEL = '''\
class MyForCausalLM(
    nn.Module, SupportsPP
):
    """Doc."""

    def __init__(self, *, vllm_config, prefix=""):
        self.lm_head = ParallelLMHead(
            1,
            2,
            prefix=f"{prefix}.head",
        )
'''


def test_statement_spans_hold_a_multi_line_call_and_a_class_header() -> None:
    spans = statement_spans(MODEL)
    assert innermost(spans, 7)[:3:2] == (7, 11)  # the assignment, not its line alone
    assert innermost(spans, 10)[:3:2] == (7, 11)
    assert innermost(spans, 1)[:3:2] == (1, 3)  # the class's header, not its body
    assert statement_spans("def (:") == []
    decorated = statement_spans("@register\nclass A:\n    x = 1\n")
    assert innermost(decorated, 1)[:3:2] == innermost(decorated, 2)[:3:2] == (1, 2)


def test_one_finding_per_site_across_phases(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text(MODEL)
    # Phase 2 records the call's first line; polish gives it the statement's span.
    [pfx601, pfx702, pfx606] = polish(
        [
            finding("PFX601", model, 7),
            finding("PFX702", model, 7),
            finding("PFX606", model, 1, group="pp"),
        ]
    )
    assert (pfx601.location.row, pfx601.end_location.row) == (7, 11)
    pfx302 = finding("PFX302", model, 10, phase="static")
    pfx501 = Diagnostic(
        "PFX501",
        "`MyForCausalLM` declares `SupportsPP` but has no `make_empty_intermediate_tensors`",
        Severity.ERROR,
        str(model),
        Position(1, 7),
        Position(1, 20),
        data=dict(ABOUT_THE_METHOD),  # PFX501's fact: the finding is about the method
    )
    merged = one_per_site([pfx501, pfx302], [pfx601, pfx702, pfx606])
    assert [(d.code, d.location.row, d.phase) for d in merged] == [
        ("PFX501", 1, "static"),
        ("PFX302", 10, "static"),
    ]
    assert [e["code"] for e in merged[1].data["runtime"]] == ["PFX601", "PFX702"]
    assert "phase 2 confirms it: PFX601 PFX601 says so; PFX702" in merged[1].message
    assert [e["code"] for e in merged[0].data["runtime"]] == ["PFX606"]
    # Without the static finding, the quantization mismatch folds into the PFX601.
    [alone] = one_per_site([], [pfx601, pfx702])
    assert alone.code == "PFX601" and alone.data["runtime"][0]["code"] == "PFX702"
    # Not the same defect: a packed_modules_mapping PFX606, a PFX501 about forward, a
    # PFX702 at a statement whose prefix is right.
    packed = finding("PFX606", model, 1, group="qkv_proj")
    forward = Diagnostic(
        **{**pfx501.__dict__, "message": "forward takes no intermediate_tensors", "data": {}}
    )
    assert len(one_per_site([forward], [packed, pfx606])) == 3
    assert len(one_per_site([], [pfx702, packed])) == 2


def test_a_registry_architecture_that_inherits_its_constructor_is_built(tmp_path: Path) -> None:
    model = tmp_path / "phi.py"
    model.write_text(
        "from vllm.model_executor.models.llama import LlamaForCausalLM\n\n\n"
        "class Phi3ForCausalLM(LlamaForCausalLM):\n"
        "    packed_modules_mapping = {}\n\n\n"
        "class Helper:\n    pass\n"
    )
    registry = frozenset({"Phi3ForCausalLM", "LlamaForCausalLM"})
    assert [(c.name, c.line) for c in architectures_in(model, registry)] == [("Phi3ForCausalLM", 4)]
    assert architectures_in(model, frozenset()) == []


def test_one_check_writes_every_format_and_review_posts_its_payload(tmp_path: Path, github) -> None:
    from tests.test_diffbase import CLEAN_MODEL

    handler, url = github
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "head.py").write_text(CLEAN_MODEL)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "pkg" / "head.py").write_text(BUGGY_MODEL)
    args = ["check", "--no-cache", "-j", "1", "--diff-base", "main", "--format", "github"]
    args += ["--also", "sarif=out.sarif", "--also", "review=review.json", "pkg"]
    code, out = invoke(args, repo)
    assert code == 1 and f"file=pkg/head.py,line={BUG_LINE}" in out, out
    sarif = json.loads((repo / "out.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["PFX302"]
    payload = json.loads((repo / "review.json").read_text())
    assert [(c["path"], c["line"]) for c in payload["comments"]] == [("pkg/head.py", BUG_LINE)]
    env = {"GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "GITHUB_API_URL": url}
    code, out = invoke(["review", "--payload", "review.json", "--post", "--pr", "3"], repo, env)
    assert code == 0, out
    [request] = handler.received
    assert request["body"] == payload
    # Wrong uses are one-line usage errors.
    for bad in (
        ["check", "--also", "review=r.json", "pkg"],  # no --diff-base
        ["check", "--also", "yaml=r.yml", "pkg"],
        ["check", "--also", "sarif", "pkg"],
        ["review", "--payload", "out.sarif"],  # not a review payload
        ["review", "--payload", "review.json", "--diff-base", "main"],
        ["review"],
    ):
        code, out = invoke(bad, repo)
        assert code == 2 and "Traceback" not in out, (bad, out)


def test_a_layer_never_given_quant_config_is_one_finding_across_phases(tmp_path: Path) -> None:
    """Issue 28: the quantization dry-run's "built without `quant_config`" at a statement
    where PFX405 reports the same is folded into the static finding (its severity raised
    to the run-time one); at a statement PFX405 does not report, it stands alone."""
    model = tmp_path / "m.py"
    model.write_text(MODEL)
    [pfx702] = polish([finding("PFX702", model, 7, kind=UNTHREADED)])  # the fact, not words
    pfx702 = replace(pfx702, message="`mlp.down_proj` was built without `quant_config`")
    pfx405 = replace(finding("PFX405", model, 7, 11, phase="static"), severity=Severity.WARNING)
    [merged] = one_per_site([pfx405], [pfx702])
    assert merged.code == "PFX405" and merged.severity == Severity.ERROR
    assert merged.data["runtime"][0]["code"] == "PFX702"
    other = finding("PFX302", model, 10, phase="static")
    assert len(one_per_site([other], [pfx702])) == 2


def test_one_noqa_per_site_across_phases(tmp_path: Path) -> None:
    """Issue 40: ``# noqa: PFX302`` on the ``prefix=`` line of a multi-line call hides the
    static finding; phase 2's PFX601 for the same site, reported at the statement's first
    line, is hidden too (a noqa anywhere on the statement, for the code or a static code of
    the same defect); a noqa for an unrelated code hides nothing."""
    model = tmp_path / "m.py"
    model.write_text(
        MODEL.replace('prefix=f"{prefix}.head",', 'prefix=f"{prefix}.head",  # noqa: PFX302')
    )
    assert polish([finding("PFX601", model, 7)]) == []
    assert polish([finding("PFX602", model, 7)]) == []  # a duplicate name from that prefix
    [kept] = polish([finding("PFX607", model, 7)])  # another defect of the statement
    assert kept.code == "PFX607"
    model.write_text(MODEL.replace("            1,\n", "            1,  # noqa: PFX601\n"))
    assert polish([finding("PFX601", model, 7)]) == []
    model.write_text(MODEL.replace("            1,\n", "            1,  # noqa: PFX405\n"))
    assert len(polish([finding("PFX601", model, 7)])) == 1


def test_static_and_phase2_findings_on_one_statement_are_one(tmp_path: Path) -> None:
    """Issue 40: a literal prefix (PFX303, a note) and phase 2's duplicate name (PFX602, an
    error) at one statement are one finding, an error; so are PFX405 and any PFX702 of
    the statement (not only the dry-run's "built without `quant_config`")."""
    model = tmp_path / "m.py"
    model.write_text(MODEL)
    pfx303 = replace(finding("PFX303", model, 10, phase="static"), severity=Severity.NOTE)
    [pfx602] = polish([finding("PFX602", model, 7)])
    [merged] = one_per_site([pfx303], [pfx602])
    assert merged.code == "PFX303" and merged.severity == Severity.ERROR
    assert [r["code"] for r in merged.data["runtime"]] == ["PFX602"]
    pfx405 = replace(finding("PFX405", model, 7, 11, phase="static"), severity=Severity.NOTE)
    [pfx702] = polish([finding("PFX702", model, 7)])
    [merged] = one_per_site([pfx405], [pfx702])
    assert merged.code == "PFX405" and merged.severity == Severity.ERROR
