"""The model's own failures are findings, not "not verified" notes (issue 30's trial): a
raise every layout and config variant reaches is PFX604 at its line; a head count fixed
by a literal in the model's code is PFX603 at that line; a raise before any layer is built
gives no "a config with more layers" note. The evidence (``verdict/own.py``) is unit-tested
on plain Python tracebacks; the verdicts on copies of the installed vLLM's llama.py."""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from prefixlint.introspect.verdict import own
from tests.conftest import model_module, requires_vllm
from tests.test_introspect import line_in_class, llama_copy, replace_in_class

INIT = "        self.config = config\n"
RAISES = (
    "        if config.hidden_size > 0:\n            raise ValueError('this model is broken')\n"
)


def _traceback(tmp_path: Path, source: str, call: str) -> tuple[Any, BaseException]:
    module = model_module(tmp_path, textwrap.dedent(source))
    try:
        eval(call, vars(module))
    except Exception as e:
        return e.__traceback__, e
    raise AssertionError("did not raise")


def _model(file: str) -> bool:
    """The toy model's file is the model's code (``model_module`` names it)."""
    return "toy_model_" in file


def _reads(tmp_path: Path, source: str, call: str) -> dict[str, set[int]] | None:
    tb, _ = _traceback(tmp_path, source, call)
    return own.config_reads(tb, _model)


def test_config_reads_of_a_raise(tmp_path: Path) -> None:
    direct = """
        class Config:
            vocab_size = 256

        def build(config):
            if config.vocab_size < 100000:
                raise ValueError("small")
        """
    assert _reads(tmp_path, direct, "build(Config())") == {"vocab_size": {100000}}
    # no condition at all: nothing a config could change
    assert _reads(tmp_path, "def always(config):\n    raise ValueError('x')\n", "always(1)") == {}
    # a parameter, a local or a `self` attribute may hold a config value (LlavaOnevision2's
    # `assert head_dim % 16 == 0`, MiniCPM-V's `assert self.version == (2, 6)`): not told
    param = "def rope(head_dim):\n    assert head_dim % 16 == 0\n"
    assert _reads(tmp_path, param, "rope(8)") is None
    local = """
        class Config:
            vocab_size = 256

        def build(config):
            size = config.vocab_size
            if size < 100000:
                raise ValueError("small")
        """
    assert _reads(tmp_path, local, "build(Config())") is None
    caught = """
        def build(config):
            try:
                {}[config]
            except KeyError:
                raise ValueError("unknown")
        """
    assert _reads(tmp_path, caught, "build(1)") is None
    # vLLM's engine configs are not the model's config
    quant = """
        class Q:
            bits = 3

        def build(quant_config):
            if quant_config.bits > 2:
                raise ValueError("bits")
        """
    assert _reads(tmp_path, quant, "build(Q())") is None


def test_variants_of_the_values_read() -> None:
    current = {"vocab_size": 256, "hidden_size": 64, "tie": True}.get
    assert own.variants({"vocab_size": {100000}}, current) == [
        {"vocab_size": 100000},
        {"vocab_size": 100001},
    ]
    # a width compared with 0: no checkpoint has a zero width; a flag: flipped
    assert own.variants({"hidden_size": {0}}, current) == [{"hidden_size": 1}]
    assert own.variants({"tie": set()}, current) == [{"tie": False}]
    # nothing a checkpoint could hold instead: cannot be told
    assert own.variants({"hidden_size": set()}, current) == []


def test_an_error_an_operation_raised_is_no_raising_statement(tmp_path: Path) -> None:
    tb, _ = _traceback(tmp_path, "def index(config):\n    return [][config]\n", "index(3)")
    assert own.raising_statement(tb, _model) is None


def test_fixed_head_count_is_found_at_its_literal(tmp_path: Path) -> None:
    tb, error = _traceback(
        tmp_path,
        """
        class Attention:
            def __init__(self, num_heads, tp_size):
                self.total_num_heads = num_heads
                assert self.total_num_heads % tp_size == 0

        def layer(config, tp_size):
            return Attention(
                num_heads=6,
                tp_size=tp_size,
            )
        """,
        "layer(None, 4)",
    )
    file, line, name, value = own.fixed_head_count(tb, error, _model, (8, 8)) or ("", 0, "", 0)
    assert (name, value) == ("num_heads", 6)
    assert Path(file).read_text().splitlines()[line - 1].strip() == "num_heads=6,"
    # the config's own count: the config's (PFX603's warning), not the code's
    assert own.fixed_head_count(tb, error, _model, (6, 6)) is None


def _planted(tmp_path: Path, name: str, old: str, new: str, cls: str = "LlamaForCausalLM"):
    return llama_copy(tmp_path, name, replace_in_class(cls, old, new))


def _config(tmp_path: Path, heads: int = 4) -> str:
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=96,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        vocab_size=256,
    ).save_pretrained(tmp_path / "cfg")
    return str(tmp_path / "cfg")


@requires_vllm
@pytest.mark.slow
def test_a_raise_every_config_reaches_is_pfx604(worker, tmp_path: Path) -> None:
    from prefixlint.introspect import introspect

    path, text = _planted(tmp_path, "raiser", INIT, INIT + RAISES)
    raising = line_in_class(text, "LlamaForCausalLM", "raise ValueError")
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(1, 2), worker=worker)
    [diag] = report.diagnostics
    assert (diag.code, diag.severity.value, diag.location.row) == ("PFX604", "error", raising)
    assert "this model is broken" in diag.message and "tp=1 pp=2" in diag.message
    assert report.results[0]["category"] == "finding"
    # a given config, pipeline layouts only: no "a config with more layers" for a raise
    # before any layer was built
    given = introspect(
        f"{path}:LlamaForCausalLM", tp=(1,), pp=(2,), config=_config(tmp_path), worker=worker
    )
    assert [d.code for d in given.diagnostics] == ["PFX604"], [d.message for d in given.diagnostics]


@requires_vllm
@pytest.mark.slow
def test_a_head_count_fixed_in_the_code_is_pfx603_at_its_line(worker, tmp_path: Path) -> None:
    from prefixlint.introspect import introspect

    old = "num_heads=config.num_attention_heads,"
    path, text = _planted(tmp_path, "heads6", old, "num_heads=6,", cls="LlamaDecoderLayer")
    fixed = line_in_class(text, "LlamaDecoderLayer", "num_heads=6,")
    target = f"{path}:LlamaForCausalLM"
    for kwargs in ({"tp": (1, 4)}, {"tp": (4,), "config": _config(tmp_path, heads=8)}):
        report = introspect(target, pp=(1,), worker=worker, **kwargs)
        found = [d for d in report.diagnostics if d.code != "PFX601"]  # llama's known one
        assert [(d.code, d.severity.value, d.location.row) for d in found] == [
            ("PFX603", "error", fixed)
        ], [d.message for d in report.diagnostics]
        assert "`num_heads=6`" in found[0].message and "AssertionError: " in found[0].message
        assert not found[0].message.rstrip().endswith("AssertionError:")


FIXTURE = Path(__file__).parent / "fixtures" / "introspect" / "llama_subclass.py"


def _fixture_class() -> type:
    """The plugin fixture's class (a subclass of vLLM's Llama), imported from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prefixlint_llama_subclass", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.PlainLlamaForCausalLM


@requires_vllm
@pytest.mark.slow  # imports vLLM
def test_notes_in_vllm_files_are_dropped_or_moved_to_the_plugin() -> None:
    from types import SimpleNamespace

    from prefixlint.introspect.coverage.sites import UNEXECUTED_SITE
    from prefixlint.introspect.finding import Finding
    from prefixlint.introspect.verdict.located import in_user_code
    from tests.conftest import VLLM

    assert VLLM is not None
    llama = str((VLLM / "model_executor" / "models" / "llama.py").resolve())
    text = Path(llama).read_text()
    mlp = line_in_class(text, "LlamaMLP", "self.gate_up_proj = ")
    head = line_in_class(text, "LlamaForCausalLM", "self.lm_head = ")
    plugin = _fixture_class()
    site = "not verified: no build executed this construction site"
    notes = [
        Finding("PFX600", "note", site, llama, mlp, group=UNEXECUTED_SITE),
        Finding("PFX600", "note", site, llama, head, group=UNEXECUTED_SITE),
        Finding("PFX600", "note", "not verified at tp=1 pp=2", llama, head),
        Finding("PFX601", "error", "wrong prefix", llama, mlp),
    ]
    # the plugin's build ran LlamaForCausalLM.__init__ (its first line), nothing of LlamaMLP
    ran = SimpleNamespace(recorder=SimpleNamespace(lines={llama: {head - 1}}))
    out = in_user_code(notes, plugin, [ran])
    where = [(f.code, Path(f.file).name, f.line) for f in out]
    plugin_file, plugin_line = Path(inspect.getsourcefile(plugin) or "").name, 41
    assert inspect.getsourcelines(plugin)[1] == plugin_line
    assert where == [
        ("PFX600", plugin_file, plugin_line),
        ("PFX600", plugin_file, plugin_line),
        ("PFX601", "llama.py", mlp),
    ]
    assert f"llama.py:{head}" in out[0].message
    # vLLM's own model keeps its notes where they are
    from vllm.model_executor.models.llama import LlamaForCausalLM

    again = [Finding("PFX600", "note", site, llama, mlp, group=UNEXECUTED_SITE)]
    assert [f.line for f in in_user_code(again, LlamaForCausalLM, [ran])] == [mlp]


@requires_vllm
@pytest.mark.slow
def test_a_plugin_subclass_gets_no_note_in_vllm_files(worker) -> None:
    from prefixlint.introspect import introspect
    from tests.conftest import VLLM

    report = introspect(f"{FIXTURE}:PlainLlamaForCausalLM", tp=(1, 2), pp=(1,), worker=worker)
    notes = [d for d in report.diagnostics if d.code == "PFX600"]
    assert notes  # the dry-run's note, at the plugin's class
    assert VLLM is not None
    vllm = str(VLLM.resolve())
    assert [d.message for d in notes if str(Path(d.filename).resolve()).startswith(vllm)] == []


def _import_error(tmp_path: Path, module: str) -> ModuleNotFoundError:
    import importlib

    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        return e
    finally:
        sys.path.remove(str(tmp_path))
    raise AssertionError("imported")


@requires_vllm
def test_a_module_its_own_package_lacks_is_the_models_error(tmp_path: Path) -> None:
    """Issue 30's trial: a model importing a module that does not exist passed with a
    note. A module of the model's own package that is not there is PFX604 at the import;
    a top-level package that is not installed (an optional dependency, vLLM's `cutlass`)
    stays a gap of this machine (no finding here, a note later)."""
    from prefixlint.introspect.checks.pfx608_engine_start import import_failure

    package = tmp_path / "toyown_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("import os\n\nfrom .layerz import Linear\n")
    (package / "other.py").write_text("import toyown_not_installed_anywhere\n")
    finding = import_failure(_import_error(tmp_path, "toyown_pkg.model"))
    assert finding is not None
    assert (finding.code, finding.file, finding.line) == ("PFX604", str(package / "model.py"), 3)
    assert "`toyown_pkg.layerz`" in finding.message
    assert import_failure(_import_error(tmp_path, "toyown_pkg.other")) is None


# issue 40: a layer loop that assumes every layer is built on this stage (no
# `PPMissingLayer`): the tensor-parallel layouts build with the synthesised config, the
# pipeline stages fail at the loop
PP_LOOP = (
    "        )\n        if get_pp_group().is_last_rank:\n",
    "        )\n        self.attns = [layer.self_attn for layer in self.layers]\n"
    "        if get_pp_group().is_last_rank:\n",
)


@requires_vllm
@pytest.mark.slow
def test_a_failure_only_pipeline_stages_reach_is_the_models(worker, tmp_path: Path) -> None:
    """The same synthesised config builds every tensor-parallel layout; the pipeline
    stages fail in the model's own loop: PFX604 at the loop, naming the layouts, and the
    target is not "not verified"."""
    from prefixlint.introspect import introspect

    path, text = llama_copy(tmp_path, "pp_loop", replace_in_class("LlamaModel", *PP_LOOP))
    loop = line_in_class(text, "LlamaModel", "self.attns = [")
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1, 2), pp=(1, 2), worker=worker)
    found = [(d.code, d.severity.value, d.location.row) for d in report.diagnostics]
    assert ("PFX604", "error", loop) in found, [d.message for d in report.diagnostics]
    assert not [d for d in report.diagnostics if d.code == "PFX600" and "building `" in d.message]
    [own] = [d for d in report.diagnostics if d.code == "PFX604"]
    assert "PPMissingLayer" in own.message and "pp=2" in own.message


# issue 40: a layer index read from a prefix shape the model does not have
# (`model.layers.0`: its second part is `layers`), under a synthesised config that vLLM's
# own class of the same architecture builds
PREFIX_INDEX = (
    "        self.hidden_size = config.hidden_size\n",
    "        self.hidden_size = config.hidden_size\n"
    '        self.layer_idx = int(prefix.split(".")[1])\n',
)


@requires_vllm
@pytest.mark.slow
def test_a_failure_vllms_own_class_does_not_have_is_the_models(worker, tmp_path: Path) -> None:
    """vLLM's LlamaForCausalLM builds with the synthesised config that the copy fails
    with: the config explains nothing, the failure is PFX604 at the copy's line."""
    from prefixlint.introspect import introspect

    path, text = llama_copy(tmp_path, "idx", replace_in_class("LlamaDecoderLayer", *PREFIX_INDEX))
    line = line_in_class(text, "LlamaDecoderLayer", "self.layer_idx = int(")
    report = introspect(f"{path}:LlamaForCausalLM", tp=(1,), pp=(1,), worker=worker)
    found = [(d.code, d.severity.value, d.location.row) for d in report.diagnostics]
    assert ("PFX604", "error", line) in found, [d.message for d in report.diagnostics]
    assert report.results[0]["category"] == "finding"
