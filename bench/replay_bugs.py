"""The real bugs of ``tests/test_real_bugs.py`` replayed as pull requests (issue 39).

    .venv/bin/python bench/replay_bugs.py
    .venv/bin/python bench/replay_bugs.py --benign-introspect

For each case: a temp git repository whose base commit is the installed vLLM's model file
and whose head applies the bug's edit (at ``vllm/model_executor/models/``, as
``tests/conftest.py``'s ``vllm_copy``). Then ``check --diff-base base`` (static phase,
base against head) and, for comparison, the filter by changed lines that ``--diff-base``
was before (the whole file's findings kept when one of their lines changed). A case is
*caught* when an error or warning sits on a changed line or points into the diff
(``data.changed_line``); *listed* when the change's finding has no changed line in its
function or class (the review's body lists it). Also counts findings left out because
the base had them.

Benign refactors (``BENIGN``) replayed the same way must get no finding;
``--benign-introspect`` replays them with phase 2's builds compared too.
These cases shaped the static rules: they are no held-out set.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cases() -> list[tuple[str, str, object]]:
    """(id, model file, edit) of every case of tests/test_real_bugs.py."""
    import tests.test_real_bugs as bugs

    out: list[tuple[str, str, object]] = []
    for case in bugs.CASES:
        name, _, old, new, _ = case
        out.append((name, "llama.py", lambda t, o=old, n=new: t.replace(o, n, 1)))
    contract = bugs.test_recreated_contract_bug.pytestmark[0].args[1]
    for code, edit, _ in contract:
        out.append((f"contract-{code}", "llama.py", edit))
    for name, file, edit, *_ in bugs.SILENT_CASES:
        out.append((name, file, edit))
    return out


def _move_mlp_below_attention(text: str) -> str:
    start, mid = text.index("class LlamaMLP("), text.index("class LlamaAttention(")
    end = text.index("class LlamaDecoderLayer(")
    return text[:start] + text[mid:end] + text[start:mid] + text[end:]


EMBED = (
    "            self.embed_tokens = VocabParallelEmbedding(\n"
    "                self.vocab_size,\n"
    "                config.hidden_size,\n"
    "                quant_config=quant_config,\n"
    "            )\n"
)
# (id, file, edit): refactors that change no behaviour; vLLM's llama.py has an old defect
# (embed_tokens' prefix) that none of them may bring up.
BENIGN = [
    ("benign-move-a-class", "llama.py", _move_mlp_below_attention),
    (
        "benign-reformat-the-old-defect",
        "llama.py",
        lambda t: t.replace(
            EMBED,
            "            self.embed_tokens = VocabParallelEmbedding("
            "self.vocab_size, config.hidden_size, quant_config=quant_config)\n",
        ),
    ),
    (
        "benign-docstring",
        "llama.py",
        lambda t: t.replace(
            "    ) -> torch.Tensor | IntermediateTensors:\n        model_output",
            "    ) -> torch.Tensor | IntermediateTensors:\n"
            '        """Run."""\n        model_output',
        ),
    ),
    (
        "benign-rename-a-local",
        "llama.py",
        lambda t: t.replace("model_output = self.model(", "out = self.model(").replace(
            "        return model_output\n", "        return out\n", 1
        ),
    ),
    (
        "benign-helper-and-comment",
        "llama.py",
        lambda t: t.replace(
            "\nclass LlamaMLP(",
            "\ndef _twice(x: int) -> int:\n    return 2 * x\n\n\nclass LlamaMLP(",
        ).replace(EMBED, "            # the input embedding\n" + EMBED),
    ),
]


def replay(folder: Path, file: str, edit) -> None:
    from prefixlint.static.index import find_installed_package
    from tests.test_diffbase import git

    vllm = find_installed_package("vllm")
    models = folder / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    for package in (folder / "vllm", folder / "vllm" / "model_executor", models):
        (package / "__init__.py").write_text("")
    text = (vllm / "model_executor" / "models" / file).read_text()
    (models / file).write_text(text)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "base")
    git(folder, "tag", "base")
    changed = edit(text)
    if changed == text:
        raise ValueError("the edit does not apply to this vLLM")
    (models / file).write_text(changed)
    git(folder, "commit", "-q", "-am", "bug")


def check(folder: Path, *args: str) -> list[dict]:
    from tests.test_diffbase import invoke

    code, out = invoke(["check", "--no-cache", "-j", "1", "--format", "json", *args], folder)
    if code not in (0, 1):
        raise RuntimeError(out[-2000:])
    return json.loads(out)


def judge(folder: Path) -> dict[str, int]:
    from prefixlint.diagnostic import Diagnostic
    from prefixlint.diffbase import changed_lines

    changes = changed_lines("base", folder)
    found = [f for f in check(folder, "--diff-base", "base") if f["severity"] != "note"]
    on_diff = [f for f in found if changes.touches(Diagnostic.from_json(f), folder)]
    pointing = [f for f in found if (f.get("data") or {}).get("changed_line")]
    whole = [Diagnostic.from_json(f) for f in check(folder) if f["severity"] != "note"]
    by_lines = changes.filter(whole, folder)
    return {
        "caught": int(bool(on_diff or pointing)),
        "listed": int(bool(found) and not (on_diff or pointing)),
        "by_lines": int(bool(by_lines)),
        "findings": len(found),
        "pointing": len(pointing),
    }


def benign_introspect() -> None:
    """The benign refactors with phase 2 compared too (``--introspect``: tp=1, pp=2):
    base and head build the same parameters, prefixes, attention names and loads, so
    nothing may be reported."""
    for name, file, edit in BENIGN:
        folder = Path(tempfile.mkdtemp(prefix="prefixlint-replay-"))
        try:
            replay(folder, file, edit)
            from tests.test_diffbase import invoke

            report = folder / "report.json"  # stdout: the CLI runner mixes in progress
            args = ["check", "--no-cache", "--format", "json", "-o", str(report)]
            args += ["--diff-base", "base", "--introspect", "--tp", "1", "--pp", "2"]
            code, out = invoke(args, folder)
            if code not in (0, 1):
                raise RuntimeError(out[-2000:])
            found = [f for f in json.loads(report.read_text()) if f["severity"] != "note"]
            print(f"{name:46s} {file:16s} findings with phase 2: {len(found)}", flush=True)
            for f in found:
                print(f"    {f['code']} {f['location']['row']}: {f['message'][:120]}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    os.environ.setdefault("PREFIXLINT_WARM_WORKER", "0")
    if "--benign-introspect" in sys.argv[1:]:
        benign_introspect()
        return
    rows = []
    for name, file, edit in [*cases(), *BENIGN]:
        folder = Path(tempfile.mkdtemp(prefix="prefixlint-replay-"))
        try:
            replay(folder, file, edit)
            rows.append((name, file, judge(folder)))
        except (ValueError, RuntimeError) as e:
            rows.append((name, file, {"error": str(e)[:80]}))  # type: ignore[dict-item]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"{'case':46s} {'file':16s} caught listed by-lines findings pointing")
    for name, file, r in rows:
        if "error" in r:
            print(f"{name:46s} {file:16s} {r['error']}")
            continue
        print(
            f"{name:46s} {file:16s} {r['caught']:6d} {r['listed']:6d} {r['by_lines']:8d} "
            f"{r['findings']:8d} {r['pointing']:8d}"
        )
    ok = [r for n, _, r in rows if "error" not in r and not n.startswith("benign")]
    print(
        f"{len(ok)} bugs: caught {sum(r['caught'] for r in ok)}, listed only "
        f"{sum(r['listed'] for r in ok)}; the filter by lines alone: "
        f"{sum(r['by_lines'] for r in ok)}"
    )
    benign = [r for n, _, r in rows if "error" not in r and n.startswith("benign")]
    print(
        f"{len(benign)} benign refactors: with a finding {sum(bool(r['findings']) for r in benign)}"
        f"; the filter by lines alone: {sum(r['by_lines'] for r in benign)}"
    )


if __name__ == "__main__":
    main()
