"""Base against head (issue 39): bugs replayed as pull requests in a temp git repository.

The base commit is a copy of the installed vLLM's model file (made at test time, as
``vllm_copy`` does); the head commit applies the bug. A finding the change causes is
reported wherever it sits, and off the diff it points at the nearest changed line of its
function or class; a finding that was there at the base is left out and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixlint.basediff import SiteIndex, anchor_line, site_key
from prefixlint.basediff_builds import compare_builds, settled
from prefixlint.check_introspect import Phase2Result, note
from prefixlint.diagnostic import Diagnostic, Severity
from prefixlint.diffbase import ChangedLines
from tests.conftest import requires_vllm
from tests.test_diffbase import findings, git, invoke

pytestmark = requires_vllm
LLAMA = "vllm/model_executor/models/llama.py"
# LlamaForCausalLM.forward's signature and call (vLLM 0.32).
FORWARD = (
    "        input_ids: torch.Tensor | None,\n"
    "        positions: torch.Tensor,\n"
    "        intermediate_tensors: IntermediateTensors | None = None,\n"
    "        inputs_embeds: torch.Tensor | None = None,\n"
    "    ) -> torch.Tensor | IntermediateTensors:\n"
    "        model_output = self.model(\n"
    "            input_ids, positions, intermediate_tensors, inputs_embeds\n"
    "        )"
)
PP_ATTRIBUTE = (
    "        self.make_empty_intermediate_tensors = (\n"
    "            self.model.make_empty_intermediate_tensors\n"
    "        )\n"
)
WIDER = "output_sizes=[intermediate_size] * 3,"
GATE_UP_QUANT = "            quant_config=quant_config,\n            disable_tp=disable_tp,\n"
# vLLM's own old defect: LlamaModel's embed_tokens takes quant_config without a prefix.
EMBED = (
    "            self.embed_tokens = VocabParallelEmbedding(\n                self.vocab_size,\n"
)


def replay(vllm_copy, tmp_path: Path, edit, name: str = "llama.py") -> Path:
    """A repository whose ``base`` tag holds vLLM's ``name`` and whose HEAD applies ``edit``."""
    target = vllm_copy(name)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    git(tmp_path, "tag", "base")
    text = target.read_text()
    changed = edit(text)
    assert changed != text, "the bug's edit does not apply to this vLLM"
    target.write_text(changed)
    git(tmp_path, "commit", "-q", "-am", "the pull request")
    return tmp_path


def row_of(repo: Path, needle: str, path: str = LLAMA) -> int:
    lines = (repo / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def caused(repo: Path) -> list[tuple[str, int, int | None]]:
    new = findings(["--diff-base", "base"], repo)
    return [
        (f["code"], f["location"]["row"], f.get("data", {}).get("changed_line"))
        for f in new
        if f["severity"] != "note"
    ]


def review(repo: Path) -> tuple[int, dict]:
    code, out = invoke(["review", "--no-cache", "-j", "1", "--diff-base", "base"], repo)
    assert code in (0, 1), out
    return code, json.loads(out)


def test_a_removed_quant_config_is_reported_at_its_construction_statement(
    vllm_copy, tmp_path: Path
) -> None:
    repo = replay(
        vllm_copy,
        tmp_path,
        lambda s: s.replace(GATE_UP_QUANT, "            disable_tp=disable_tp,\n", 1),
    )
    statement = row_of(repo, "self.gate_up_proj = MergedColumnParallelLinear(")
    assert caused(repo) == [("PFX405", statement, None)]  # the deletion is in its span
    code, payload = review(repo)
    assert code == 1 and [c["body"][:10] for c in payload["comments"]] == ["**PFX405**"]


def test_a_removed_method_is_reported_at_the_class_header(vllm_copy, tmp_path: Path) -> None:
    repo = replay(vllm_copy, tmp_path, lambda s: s.replace(PP_ATTRIBUTE, ""))
    header = row_of(repo, "class LlamaForCausalLM(")
    base = git(repo, "show", f"base:{LLAMA}")
    deleted_after = base[: base.index(PP_ATTRIBUTE)].count("\n")  # the row above it
    found = caused(repo)
    # the class header is unchanged, and the change's: it points at the deletion
    assert ("PFX501", header, deleted_after) in found, found
    # the subclasses lose it too (their own headers, no changed line in them)
    subclasses = [r for c, r, at in found if c == "PFX501" and at is None]
    assert subclasses and all(r > header for r in subclasses)
    code, payload = review(repo)
    assert code == 1
    [comment] = [c for c in payload["comments"] if "PFX501" in c["body"]]
    assert comment["line"] == deleted_after
    assert f"At `{LLAMA}:{header}`" in comment["body"]
    for row in subclasses:  # listed in the body at their own lines
        assert f"`{LLAMA}:{row}` **PFX501**" in payload["body"]


def test_a_renamed_parameter_on_another_signature_line_keeps_the_pfx201(
    vllm_copy, tmp_path: Path
) -> None:
    rename = FORWARD.replace("intermediate_tensors", "inter")
    repo = replay(vllm_copy, tmp_path, lambda s: s.replace(FORWARD, rename))
    renamed = row_of(repo, "        inter: IntermediateTensors | None = None,")
    found = caused(repo)
    assert ("PFX201", renamed - 4, renamed) in found, found  # at `def forward(`
    _, payload = review(repo)
    assert [c["line"] for c in payload["comments"] if "PFX201" in c["body"]] == [renamed]


def test_an_old_defect_gets_no_comment_when_an_unrelated_edit_touches_it(
    vllm_copy, tmp_path: Path
) -> None:
    edit = EMBED.replace("self.vocab_size,", "config.vocab_size,")
    repo = replay(vllm_copy, tmp_path, lambda s: s.replace(EMBED, edit))
    old = row_of(repo, "self.embed_tokens = VocabParallelEmbedding(")
    whole = findings([], repo)
    # the old defect is on the edited statement: a filter by lines would keep it
    assert any(f["code"] == "PFX301" and f["location"]["row"] == old for f in whole)
    assert caused(repo) == []
    code, text = invoke(["check", "--no-cache", "-j", "1", "--diff-base", "base"], repo)
    assert code == 0 and "1 finding the change did not cause" in text
    code, payload = review(repo)
    assert code == 0 and payload["comments"] == []
    assert "the change causes no finding" in payload["body"]
    assert "finding the change did not cause" in payload["body"]


def test_a_benign_refactor_gets_no_comment(vllm_copy, tmp_path: Path) -> None:
    """A helper added above everything (every line moves) and a local renamed."""

    def refactor(text: str) -> str:
        helper = "\n\ndef _unused_helper(x: int) -> int:\n    return x + 1\n"
        at = text.index("\nclass LlamaMLP(")
        text = text[:at] + helper + text[at:]
        return text.replace("model_output = self.model(", "hidden = self.model(").replace(
            "        return model_output\n", "        return hidden\n", 1
        )

    repo = replay(vllm_copy, tmp_path, refactor)
    assert caused(repo) == []
    code, payload = review(repo)
    assert code == 0 and payload["comments"] == []


def test_an_added_file_has_no_base_and_a_deleted_file_gives_nothing(
    vllm_copy, tmp_path: Path
) -> None:
    repo = replay(vllm_copy, tmp_path, lambda s: s + "\n# touched\n")
    legacy = Path(__file__).parent / "fixtures" / "diffbase" / "legacy.py"
    (repo / LLAMA).with_name("mine.py").write_text(legacy.read_text())  # PFX301 at line 7
    git(repo, "rm", "-q", LLAMA)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "add mine.py, delete llama.py")
    found = findings(["--diff-base", "base"], repo)
    assert [(f["filename"], f["code"], f["location"]["row"]) for f in found] == [
        ("vllm/model_executor/models/mine.py", "PFX301", 7)
    ]


def test_identity_ignores_lines_and_words_and_anchors_in_the_same_scope(tmp_path: Path) -> None:
    before = (
        "class A:\n    def f(self):\n        self.x = g(\n            1,\n"
        "            prefix='a',\n        )\n"
    )
    after = "\n\n# moved\n" + before.replace("'a'", "'b'")
    b, a = SiteIndex(before), SiteIndex(after)
    at = lambda row, text: Diagnostic.at_line("PFX302", text, "m.py", row)  # noqa: E731
    assert site_key(at(5, "one"), "m.py", b) == site_key(at(8, "two"), "m.py", a)
    assert site_key(at(3, "x"), "m.py", b) != site_key(at(5, "x"), "m.py", b)  # prefix=
    changes = ChangedLines(tmp_path, "b" * 40, "h" * 40, lines={"m.py": {6}})
    assert anchor_line(changes, "m.py", b, 2) == 6  # the header of f: inside f
    changes.lines = {"m.py": set()}
    assert anchor_line(changes, "m.py", b, 2) is None  # nothing changed in A


def test_a_layout_built_at_the_base_and_failing_at_head_is_pfx604(tmp_path: Path) -> None:
    model = str(tmp_path / "m.py")

    def built(*statuses: str) -> Phase2Result:
        layouts = {
            f"tp{i}": {"status": s, "reason": "" if s == "built" else "boom", "params": {}}
            for i, s in enumerate(statuses)
        }
        return Phase2Result(
            builds={"MyForCausalLM": {"file": model, "line": 3, "layouts": layouts}}
        )

    gap = note(model, 9, "`MyForCausalLM` not verified: a config gap", "MyForCausalLM")
    [found] = compare_builds(built("built", "built"), built("built", "failed"), [gap])
    assert (found.code, found.severity, found.location.row) == ("PFX604", Severity.WARNING, 9)
    assert found.data["layouts"] == ["tp1"] and "boom" in found.message
    # nothing lost, or head's build already has an error there: left as it is
    assert compare_builds(built("built"), built("built"), [gap]) == [gap]
    error = Diagnostic.at_line("PFX601", "x", model, 5, data={"architecture": "MyForCausalLM"})
    assert compare_builds(built("built"), built("failed"), [error]) == [error]


@pytest.mark.slow
def test_phase_2_compares_base_and_head_builds(vllm_copy, tmp_path: Path) -> None:
    """The whole flow with real builds of the copy (not the installed llama.py): the
    removed PP attribute is kept at the class header with phase 2's PFX606 as evidence,
    the widened projection is a reshaped parameter, and phase 2's finding of vLLM's old
    defect in the file (embed_tokens' prefix, PFX601) is left out."""

    def edit(text: str) -> str:
        text = text.replace(PP_ATTRIBUTE, "")
        return text.replace("output_sizes=[intermediate_size] * 2,", WIDER, 1)

    repo = replay(vllm_copy, tmp_path, edit)
    header = row_of(repo, "class LlamaForCausalLM(")
    report = tmp_path / "report.json"  # stdout: the CLI runner mixes in phase 2's progress
    args = ["check", "--no-cache", "--format", "json", "-o", str(report), "--diff-base", "base"]
    code, out = invoke([*args, "--introspect", "--tp", "1,2", "--pp", "2"], repo)
    assert code == 1, out
    new = [f for f in json.loads(report.read_text()) if f["severity"] != "note"]
    [pp] = [f for f in new if f["code"] == "PFX501" and f["location"]["row"] == header]
    assert "PFX606" in {r["code"] for r in pp["data"]["runtime"]}
    # at the construction of the reshaped module (not the class header: that is in another
    # class than the edit), pointing at the edited line of that statement's function
    built = row_of(repo, "self.gate_up_proj = MergedColumnParallelLinear(")
    [reshaped] = [f for f in new if f.get("data", {}).get("group") == "base-parameters"]
    assert reshaped["severity"] == "warning"
    assert reshaped["location"]["row"] == built, reshaped
    wider = row_of(repo, WIDER)
    assert reshaped["data"].get("changed_line") in (None, wider)
    assert "model.layers.0.mlp.gate_up_proj.weight" in reshaped["data"]["reshaped"]
    assert not [f for f in new if f["code"] == "PFX601"], new  # the base had it


def test_parameters_that_changed_between_base_and_head_are_pfx701(tmp_path: Path) -> None:
    model = str(tmp_path / "m.py")

    def built(params: dict, status: str = "built") -> Phase2Result:
        layouts = {"tp1_pp1": {"status": status, "reason": "", "params": params}}
        return Phase2Result(
            builds={"MyForCausalLM": {"file": model, "line": 3, "layouts": layouts}}
        )

    base = {"lm_head.weight": [8, 4], "model.norm.weight": [4], "model.gate.weight": [2, 4]}
    head = {"lm_head.weight": [8, 4], "model.norm.weight": [8], "model.router.weight": [2, 4]}
    [found] = compare_builds(built(base), built(head), [])
    assert (found.code, found.severity, found.location.row) == ("PFX701", Severity.WARNING, 3)
    assert found.data["gone"] == ["model.gate.weight"]
    assert found.data["new"] == ["model.router.weight"]
    assert found.data["reshaped"] == {"model.norm.weight": [[4], [8]]}
    assert "`model.gate.weight`" in found.message
    # the same parameters: nothing; no layout built at both: the lost layout only
    assert compare_builds(built(base), built(dict(base)), []) == []
    lost = compare_builds(built(base), built(head, status="failed"), [])
    assert [d.code for d in lost] == ["PFX604"]


def test_the_base_copies_stay_in_the_results_cache_for_the_next_run(
    vllm_copy, tmp_path: Path
) -> None:
    repo = replay(vllm_copy, tmp_path, lambda s: s.replace(PP_ATTRIBUTE, ""))

    def run() -> list:
        code, out = invoke(["check", "-j", "1", "--format", "json", "--diff-base", "base"], repo)
        assert code == 1, out
        return json.loads(out)

    first = run()
    copy = repo / ".prefixlint_cache" / "base" / git(repo, "rev-parse", "base") / LLAMA
    assert copy.read_text() == git(repo, "show", f"base:{LLAMA}") + "\n"
    assert git(repo, "status", "--porcelain") == ""  # the cache is no change of the repo
    assert run() == first and {f["code"] for f in first} == {"PFX501"}


def test_review_exits_1_on_the_change_s_warning_only_with_fail_on_warning(
    vllm_copy, tmp_path: Path
) -> None:
    from tests.test_real_bugs import SILENT_CASES

    [(_, file, edit, *_)] = [c for c in SILENT_CASES if c[0] == "nn-linear-router-in-moe-block"]
    repo = replay(vllm_copy, tmp_path, edit, name=file)
    args = ["review", "--no-cache", "-j", "1", "--diff-base", "base"]
    code, out = invoke(args, repo)
    payload = json.loads(out)
    assert code == 0 and [c["body"][:10] for c in payload["comments"]] == ["**PFX402**"]
    assert "0 errors, 1 warning" in payload["body"]
    code, out = invoke([*args, "--fail-on", "warning"], repo)
    assert code == 1 and json.loads(out) == payload


def test_identity_reads_architectures_by_their_public_name() -> None:
    index = SiteIndex("class A:\n    pass\n")
    at = Diagnostic.at_line("PFX601", "m", "m.py", 1, data={"architecture": "AForCausalLM"})
    internal = Diagnostic.at_line(
        "PFX601", "m", "m.py", 1, data={"architecture": "AForCausalLM__prefixlint"}
    )
    other = Diagnostic.at_line("PFX601", "m", "m.py", 1, data={"architecture": "BForCausalLM"})
    assert site_key(at, "m.py", index) == site_key(internal, "m.py", index)
    assert site_key(at, "m.py", index) != site_key(other, "m.py", index)


@pytest.mark.slow
def test_a_numeric_bug_is_the_change_s_pfx609(vllm_copy, tmp_path: Path) -> None:
    """A one-token change to the arithmetic (the softmax scale) that no name-level check
    sees: base and head are both compared with transformers on the same weights, and the
    head's PFX609 is new, so it is the change's (issue 39 with issue 38's comparison)."""
    scale = "self.scaling = self.head_dim**-0.5"

    def edit(text: str) -> str:
        return text.replace(scale, "self.scaling = self.head_dim**-0.4", 1)

    repo = replay(vllm_copy, tmp_path, edit)
    report = tmp_path / "report.json"
    args = ["check", "--no-cache", "--format", "json", "-o", str(report), "--diff-base", "base"]
    code, out = invoke([*args, "--introspect", "--tp", "1", "--no-dryrun"], repo)
    assert code == 1, out
    new = json.loads(report.read_text())
    [mismatch] = [f for f in new if f["code"] == "PFX609"]
    assert mismatch["severity"] == "error"
    assert mismatch["location"]["row"] == row_of(repo, "self.self_attn = attn_layer_type(")
    assert not [f for f in new if f["code"] == "PFX601"], new  # vLLM's old defect: the base's


# LlamaModel.load_weights' call of vLLM's loader, and the Attention it builds (vLLM 0.32)
LOAD = "        return loader.load_weights(weights, mapper=self.hf_to_vllm_mapper)\n"
ATTN = "        self.attn = attn_cls(\n"


def skipping(*words: str) -> str:
    kept = " and ".join(f'"{w}" not in n' for w in words)
    return LOAD.replace("(weights,", f"(((n, w) for n, w in weights if {kept}),")


def introspected(repo: Path, tmp_path: Path) -> list[dict]:
    """The change's findings with phase 2 compared (tp=1 and pp=2), warnings and errors."""
    report = tmp_path / "report.json"  # stdout: the CLI runner mixes in phase 2's progress
    args = ["check", "--no-cache", "--format", "json", "-o", str(report), "--diff-base", "base"]
    code, out = invoke([*args, "--introspect", "--tp", "1", "--pp", "2"], repo)
    assert code in (0, 1), out
    return [f for f in json.loads(report.read_text()) if f["severity"] != "note"]


def replay_on(vllm_copy, tmp_path: Path, base_edit, head_edit) -> Path:
    """``replay`` whose base already carries ``base_edit`` (an old defect of the file);
    head is ``head_edit`` of vLLM's file."""
    target = vllm_copy("llama.py")
    text = target.read_text()
    target.write_text(base_edit(text))
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base, with an old defect")
    git(tmp_path, "tag", "base")
    target.write_text(head_edit(text))
    assert target.read_text() != base_edit(text) != text, "the edits do not apply"
    git(tmp_path, "commit", "-q", "-am", "the pull request")
    return tmp_path


@pytest.mark.slow
def test_a_tensor_the_base_loaded_and_head_drops_is_a_warning_at_head_s_loader(
    vllm_copy, tmp_path: Path
) -> None:
    """The base's loader already dropped `input_layernorm` (an old PFX701 at that loader,
    so head's PFX701 there is not new: without the comparison the change says nothing);
    head's drops `post_attention_layernorm` too. The two dry-runs' typed results say what
    head no longer loads, at head's loader, pointing at the changed line."""
    repo = replay_on(
        vllm_copy,
        tmp_path,
        lambda s: s.replace(LOAD, skipping("input_layernorm"), 1),
        lambda s: s.replace(LOAD, skipping("input_layernorm", "post_attention_layernorm"), 1),
    )
    loader = row_of(repo, "return loader.load_weights(((n, w)")
    new = introspected(repo, tmp_path)
    [lost] = [f for f in new if f.get("data", {}).get("group") == "base-loading"]
    assert (lost["code"], lost["severity"]) == ("PFX701", "warning"), new
    # at `def load_weights` (the loader), off the diff: it points at the edited call
    assert loader in (lost["location"]["row"], lost["data"].get("changed_line")), new
    assert lost["data"]["dropped"] and all(
        "post_attention_layernorm" in n for n in lost["data"]["dropped"]
    )
    assert not any("input_layernorm" in n and "post" not in n for n in lost["data"]["dropped"])
    # the norm it leaves unwritten is that drop: said once, at the loader
    norm = row_of(repo, "self.post_attention_layernorm = RMSNorm(")
    assert not [f for f in new if f["location"]["row"] == norm], new


@pytest.mark.slow
def test_a_renamed_attention_layer_is_a_warning_at_its_construction(
    vllm_copy, tmp_path: Path
) -> None:
    """`self.attn` renamed `self.attention` (prefix == path at both): no parameter changes,
    but the attention layer names do (kv-cache scales, per-layer settings): a warning at
    head's construction line."""

    def rename(text: str) -> str:
        text = text.replace(ATTN, ATTN.replace(".attn", ".attention"), 1)
        text = text.replace('prefix=f"{prefix}.attn",', 'prefix=f"{prefix}.attention",', 1)
        return text.replace("attn_output = self.attn(", "attn_output = self.attention(", 1)

    repo = replay(vllm_copy, tmp_path, rename)
    built = row_of(repo, "        self.attention = attn_cls(")
    new = introspected(repo, tmp_path)
    moved = [f for f in new if f.get("data", {}).get("group") == "base-attention"]
    assert len(moved) == 1, " ".join(
        f"{f['location']['row']}:{f['data']['architecture']}" for f in moved
    )
    moved = moved[0]
    assert (moved["severity"], moved["location"]["row"]) == ("warning", built), new
    assert "model.layers.0.self_attn.attention" in moved["data"]["new"]
    assert "model.layers.0.self_attn.attn" in moved["data"]["gone"]
    assert len(moved["data"]["new"]) == len(moved["data"]["gone"])


@pytest.mark.slow
def test_a_benign_refactor_stays_silent_with_the_builds_compared(vllm_copy, tmp_path: Path) -> None:
    """The same modules built another way (a prefix written with `maybe_prefix`, keywords
    reordered, a helper added above everything): same parameters, prefixes, attention
    names and loads, so nothing with phase 2 compared."""

    def refactor(text: str) -> str:
        text = text.replace('prefix=f"{prefix}.attn",', 'prefix=maybe_prefix(prefix, "attn"),')
        helper = "\n\ndef _unused_helper(x: int) -> int:\n    return x + 1\n"
        at = text.index("\nclass LlamaMLP(")
        text = text[:at] + helper + text[at:]
        return text.replace(
            "num_kv_heads=self.num_kv_heads,\n            cache_config=cache_config,",
            "cache_config=cache_config,\n            num_kv_heads=self.num_kv_heads,",
            1,
        )

    repo = replay(vllm_copy, tmp_path, refactor)
    assert introspected(repo, tmp_path) == []


def _named(model: str, modules: dict, params: dict | None = None, loading=None) -> Phase2Result:
    layouts = {"tp1": {"status": "built", "params": params or {}, "modules": modules}}
    build = {"file": model, "line": 3, "layouts": layouts, "loading": loading or {}}
    return Phase2Result(builds={"MyForCausalLM": build})


def test_a_changed_prefix_or_attention_name_is_a_warning_at_head_s_construction(
    tmp_path: Path,
) -> None:
    """Typed facts of the builds (path -> prefix, attention layer name, file, line):
    a prefix that was not its path at the base and is another one at head (a
    quantization config's names no longer reach it), reported at the outermost module;
    a fix (head's equals its path) and equal names are silent."""
    model = str(tmp_path / "m.py")
    base = {
        "model": ["language_model.model", None, model, 10],
        "model.layers.0": ["language_model.model.layers.0", None, model, 20],
        "model.layers.0.attn": [
            "language_model.model.layers.0.attn",
            "language_model.model.layers.0.attn",
            model,
            30,
        ],
    }
    moved = {
        p: [
            m[0] and m[0].replace("language_", "lm_"),
            m[1] and m[1].replace("language_", "lm_"),
            m[2],
            m[3] + 1,
        ]
        for p, m in base.items()
    }
    [found] = compare_builds(_named(model, base), _named(model, moved), [])
    assert (found.code, found.severity, found.location.row) == ("PFX701", Severity.WARNING, 11)
    assert found.data["path"] == "model" and found.data["kind"] == "prefix"
    assert (found.data["base"], found.data["head"]) == ("language_model.model", "lm_model.model")
    fixed = {p: [p, m[1] and p, m[2], m[3]] for p, m in base.items()}
    assert compare_builds(_named(model, base), _named(model, fixed), []) == []
    assert compare_builds(_named(model, base), _named(model, dict(base)), []) == []
    # an Attention renamed (prefix == path at both, no parameter moved): its names
    attn = {"m.l0.attn": ["m.l0.attn", "m.l0.attn", model, 30]}
    renamed = {"m.l0.attention": ["m.l0.attention", "m.l0.attention", model, 31]}
    params = {"m.l0.qkv.weight": [4, 4]}
    [found] = compare_builds(_named(model, attn, params), _named(model, renamed, params), [])
    assert (found.location.row, found.data["group"]) == (31, "base-attention")
    assert (found.data["gone"], found.data["new"]) == (["m.l0.attn"], ["m.l0.attention"])
    # the whole attention block renamed: its parameters moved too, the parameter warning
    # says it (once, at the new block's construction)
    block = {"m.l0.block.attn": ["m.l0.block.attn", "m.l0.block.attn", model, 31]}
    moved_params = {"m.l0.block.qkv.weight": [4, 4]}
    block["m.l0.block.qkv"] = ["m.l0.block.qkv", None, model, 32]
    found = compare_builds(_named(model, attn, params), _named(model, block, moved_params), [])
    assert [(d.data["group"], d.location.row) for d in found] == [("base-parameters", 32)]


def test_lost_loads_compare_the_same_checkpoint_names_and_settle_with_new_findings(
    tmp_path: Path,
) -> None:
    model = str(tmp_path / "m.py")
    params = {"a.weight": [2], "b.weight": [2]}
    before = {"streamed": ["a.weight", "b.weight"], "dropped": {}, "unwritten": {}}
    after = {
        "streamed": ["a.weight", "b.weight", "c.weight"],
        "dropped": {"b.weight": [model, 7], "c.weight": [model, 7]},
        "unwritten": {"b.weight": [model, 5]},
    }
    base, head = _named(model, {}, params, before), _named(model, {}, params, after)
    [found] = compare_builds(base, head, [])
    # `c.weight` was not in the base's stream: not the same checkpoint there, not judged;
    # `b.weight`'s parameter is unwritten because its own tensor is dropped: said once
    assert (found.location.row, found.data["dropped"], found.data["unwritten"]) == (
        7,
        ["b.weight"],
        [],
    )
    # dropped after the judgement where a new PFX701 error of the change sits at that line
    error = Diagnostic.at_line("PFX701", "x", model, 7, data={"architecture": "MyForCausalLM"})
    assert settled([found, error]) == [error]
    note_there = Diagnostic.at_line("PFX701", "x", model, 7, severity=Severity.NOTE)
    assert settled([found, note_there]) == [found, note_there]
    # no complete dry-run on one side: nothing
    assert compare_builds(_named(model, {}, params), head, []) == []


def test_a_changed_prefix_is_settled_by_the_static_finding_that_carries_phase_2_s(
    tmp_path: Path,
) -> None:
    """A PR that renames a prefix (`f"{prefix}.down"`): the static PFX302 sits at the
    `prefix=` line and carries phase 2's PFX601, which phase 2 reported at the statement's
    first line, where the comparison's prefix warning sits too. One defect, one comment."""
    model = str(tmp_path / "m.py")
    warning = Diagnostic.at_line(
        "PFX701",
        "changed prefix",
        model,
        103,
        severity=Severity.WARNING,
        data={"group": "base-names", "architecture": "MyForCausalLM"},
    )
    runtime = {"code": "PFX601", "location": {"row": 103, "column": 9}}
    static = Diagnostic.at_line("PFX302", "x", model, 110, data={"runtime": [runtime]})
    assert settled([warning, static]) == [static]
    alone = Diagnostic.at_line("PFX302", "x", model, 110)  # no phase-2 evidence: both stay
    assert settled([warning, alone]) == [warning, alone]
