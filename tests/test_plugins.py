"""Out-of-tree plugin models as vLLM loads them (issue 19): the test plugin package
``tests/fixtures/plugins/toy``, installed as users install a plugin (``pip install
--no-deps --target``, on ``PYTHONPATH``) or checked as a source tree, built by name through
its ``vllm.general_plugins`` entry point; its clean model passes, and each planted defect
is caught at its line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prefixlint.introspect.process.crash import crash_site, how_it_ended
from tests.conftest import requires_vllm
from tests.toy_plugin import (
    ARCHITECTURE,
    SOURCE,
    architecture_of,
    can_install,
    install,
    line_of,
    source_copy,
)

CHECKOUT = Path(__file__).resolve().parents[1]
requires_install = pytest.mark.skipif(
    not can_install(), reason="pip and setuptools are needed to install the test plugin"
)


def run_prefixlint(*args: str, cwd: Path, site: Path | None = None, timeout: float = 900):
    path = [str(CHECKOUT)] + ([str(site)] if site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "prefixlint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


# -- fast: no build ---------------------------------------------------------------------------


def test_fixture_is_a_plugin_distribution() -> None:
    """The fixture declares its entry point as a released plugin does, and the worker
    reads it from the source tree too."""
    from prefixlint.introspect.targets.plugins import _pyproject_entry_points

    entry = _pyproject_entry_points(SOURCE / "pyproject.toml")
    assert entry == {"prefixlint_toy": "prefixlint_toy:register"}


def test_static_phase_finds_nothing_in_the_clean_fixture(tmp_path: Path) -> None:
    done = run_prefixlint("check", "--no-cache", str(SOURCE / "prefixlint_toy"), cwd=tmp_path)
    assert done.returncode == 0 and "All checks passed" in done.stdout, done.stdout


def _dump(tmp_path: Path, body: str) -> tuple[str, Path]:
    """A real faulthandler dump of a process that runs ``body`` in ``model.py``."""
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent(body))
    trace = tmp_path / "trace.txt"
    runner = (
        "import faulthandler, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        f"f = open({str(trace)!r}, 'w')\n"
        "faulthandler.enable(file=f, all_threads=True)\n"
        "import model\n"
    )
    subprocess.run([sys.executable, "-c", runner], timeout=60, capture_output=True)
    return trace.read_text(), model


def test_a_segfault_is_placed_at_the_model_line(tmp_path: Path) -> None:
    text, model = _dump(
        tmp_path,
        """
        import ctypes


        def build():
            ctypes.string_at(0)  # reads address 0: a segfault in the model's code


        build()
        """,
    )
    assert how_it_ended(text) == "Segmentation fault", text
    assert crash_site(text, str(model)) == (str(model), 6), text


def test_no_model_frame_is_no_site() -> None:
    """A dump whose frames are all the standard library's says nothing of the model."""
    import json as stdlib

    head = "Current thread 0x0001 (most recent call first):\n"
    text = f'{head}  File "{stdlib.__file__}", line 1 in x\n'
    assert crash_site(text) is None


# -- slow: builds -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The clean plugin, installed as users install a released one."""
    return install(tmp_path_factory.mktemp("plugin") / "site")


@pytest.fixture(scope="module")
def worker(site: Path):
    """One phase-2 worker whose Python finds the installed plugin (as a user's would)."""
    from prefixlint.introspect.process.client import Worker

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), str(site)])
    try:
        w = Worker()
        w.run({"kind": "list"}, 900)  # started (vLLM imported) with this environment
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    yield w
    w.close()


def _clean(report) -> None:
    [result] = report.results
    found = [(d.code, d.severity.value, d.message) for d in report.diagnostics]
    # transformers has no class for the toy's model type: the comparison with it (issue
    # 38) cannot run, and says so in one PFX600 note; nothing else
    assert result["compare"]["reason"] == "no_reference", result["compare"]
    assert report.error is None and [f[:2] for f in found] == [("PFX600", "note")], found
    assert result["status"] == "built", result
    assert result["config_source"].startswith("synthesised (prefixlint_toy:"), result
    assert result["dryrun"] == "verified", result


@requires_vllm
@requires_install
@pytest.mark.slow
def test_installed_plugin_builds_by_name_and_is_clean(worker) -> None:
    """Registered through its entry point (``load_general_plugins``), synthesised from its
    own config class (model type ``prefixlint_toy``, unknown to transformers), checked
    against a checkpoint layout derived from the model: no error, warning or note."""
    from prefixlint.introspect import introspect, list_architectures

    assert list_architectures(worker)[ARCHITECTURE] == "plugin"  # the zoo's own group
    _clean(introspect(ARCHITECTURE, tp=(1, 2), pp=(2,), worker=worker))


@requires_vllm
@requires_install
@pytest.mark.slow
def test_installed_plugin_passes_check_introspect_strict(site: Path, tmp_path: Path) -> None:
    done = run_prefixlint(
        "check",
        "--no-cache",
        "--introspect",
        "--strict",
        "--tp",
        "1",
        "--format",
        "json",
        str(site / "prefixlint_toy"),
        cwd=tmp_path,
        site=site,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # transformers has no class for the toy's model type: the comparison's note is listed,
    # as nothing to compare with, not a gap that fails --strict
    found = [(f["code"], f["data"].get("not_verified")) for f in json.loads(done.stdout)]
    assert found == [("PFX600", False)], done.stdout
    assert "ToyForCausalLM: built" in done.stderr, done.stderr


@requires_vllm
@requires_install
@pytest.mark.slow
def test_config_of_a_plugin_model_type_is_given(site: Path, tmp_path: Path) -> None:
    """``--config`` with the plugin's model type loads: its registration ran first."""
    config = {
        "model_type": "prefixlint_toy",
        "architectures": [ARCHITECTURE],
        "vocab_size": 256,
        "hidden_size": 64,
        "ffn_hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = run_prefixlint(
        "introspect",
        ARCHITECTURE,
        "--tp",
        "1",
        "--config",
        str(tmp_path / "config.json"),
        cwd=tmp_path,
        site=site,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(config: file {tmp_path / 'config.json'})" in done.stderr, done.stderr


# -- planted defects, one copy each, built in one worker ---------------------------------------

R = "        self.config = config\n        self.model = ToyModel("


def _before_model(code: str):
    return lambda s: s.replace(
        R, f"        self.config = config\n{code}        self.model = ToyModel(", 1
    )


ATTENTION = """        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim**-0.5,
            num_kv_heads=self.num_kv_heads,
            cache_config=cache_config,
            quant_config=quant_config,
            prefix=f"{prefix}.attn",
        )"""


def _attention_list(prefix: str, index: str):
    listed = f"""        self.attns = nn.ModuleList(
            [
                Attention(
                    self.num_heads,
                    self.head_dim,
                    self.head_dim**-0.5,
                    num_kv_heads=self.num_kv_heads,
                    cache_config=cache_config,
                    quant_config=quant_config,
                    prefix={prefix},
                )
                for {index} in range(2)
            ]
        )"""
    return lambda s: s.replace(ATTENTION, listed).replace(
        "self.attn(q, k, v)", "self.attns[0](q, k, v)"
    )


UNANNOTATED = """        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors:
        if get_pp"""

# tag: (edit, the text of the reported line, code, tp sizes)
PLANTED = {
    "noprefix": (
        lambda s: s.replace('            prefix=f"{prefix}.down_proj",\n', ""),
        "self.down_proj = RowParallelLinear(",
        "PFX601",
        (1,),
    ),
    "renamed": (
        lambda s: s.replace('prefix=f"{prefix}.mlp"', 'prefix=f"{prefix}.ffn"'),
        "self.mlp = ToyMLP(",
        "PFX601",
        (1,),
    ),
    "loopnoindex": (
        _attention_list('f"{prefix}.attn"', "_"),
        "                Attention(",
        "PFX602",
        (1,),
    ),
    "twoints": (
        _attention_list('f"{prefix}.attns.{i}"', "i"),
        "                Attention(",
        "PFX608",
        (1,),
    ),
    "nopp": (
        lambda s: s.replace(
            "        self.make_empty_intermediate_tensors = "
            "self.model.make_empty_intermediate_tensors\n",
            "",
        ),
        "class ToyNoppForCausalLM(",
        "PFX606",
        (1,),
    ),
    "tp3": (lambda s: s + "\n", "class ToyTp3ForCausalLM(", "PFX603", (3,)),
    "nogateup": (
        lambda s: s.replace('        "gate_up_proj": ["gate_proj", "up_proj"],\n', ""),
        "self.gate_up_proj = MergedColumnParallelLinear(",
        "PFX606",
        (1,),
    ),
    "loaderraises": (
        lambda s: s.replace(
            "                weight_loader(param, loaded_weight)",
            "                weight_loader(param, loaded_weight, shard_id)",
        ),
        " weight_loader(param, loaded_weight, shard_id)",  # not the stacked branch's
        "PFX701",
        (1,),
    ),
    "unannotated": (
        lambda s: s.replace(
            UNANNOTATED,
            "        input_ids,\n        positions,\n        intermediate_tensors,\n"
            "        inputs_embeds=None,\n    ):\n        if get_pp",
        ),
        "@support_torch_compile",
        "PFX608",
        (1,),
    ),
    "nologits": (
        lambda s: s.replace("    def compute_logits(", "    def project_logits("),
        "class ToyNologitsForCausalLM(",
        "PFX608",
        (1,),
    ),
    "sysexit": (
        _before_model("        import sys\n\n        sys.exit(3)\n"),
        "sys.exit(3)",
        "PFX604",
        (1,),
    ),
    "osexit": (
        _before_model("        import os\n\n        os._exit(3)\n"),
        "os._exit(3)",
        "PFX604",
        (1,),
    ),
    "hangs": (
        _before_model("        while True:\n            pass\n"),
        "while True:",
        "PFX604",
        (1,),
    ),
}


@requires_vllm
@requires_install
@pytest.mark.slow
@pytest.mark.parametrize("tag", sorted(PLANTED))
def test_planted_defect_is_caught_at_its_line(tag: str, worker, tmp_path: Path) -> None:
    """A copy of the clean fixture as a source tree (its ``pyproject.toml`` entry point run
    for the file target) with one defect: reported at the line that causes it, as an error
    (a warning for the heads: another tp size works), and nothing else is an error."""
    from prefixlint.introspect import introspect

    edit, text, code, tp = PLANTED[tag]
    model = source_copy(tmp_path, tag, edit)
    line = line_of(model, text)
    report = introspect(
        f"{model}:{architecture_of(model)}",
        tp=tp,
        pp=(),
        worker=worker,
        timeout=60,
        explore_budget=0,
    )
    found = [(d.code, Path(d.filename).resolve(), d.location.row) for d in report.diagnostics]
    where = [(c, r) for c, f, r in found if f == model.resolve()]
    lines = {line, line + 1} if tag == "hangs" else {line}  # the loop's test or its body
    assert any(c == code and r in lines for c, r in where), (report.error, report.diagnostics)
    wanted = "warning" if code == "PFX603" else "error"
    assert any(d.code == code and d.severity.value == wanted for d in report.diagnostics)
    # nothing else is an error, but what the same line causes (a wrong prefix is PFX601
    # and, under a quantization config, PFX702 there)
    elsewhere = [
        (d.code, d.location.row, d.message)
        for d in report.diagnostics
        if d.severity.value == "error" and d.location.row not in lines
    ]
    assert not elsewhere, elsewhere


AUDIO_CONFIG = """

class ToyAudioConfig(PretrainedConfig):
    \"\"\"The audio tower's config: registered by the plugin, not the model's.\"\"\"

    model_type = "{package}_audio"

    def __init__(self, hidden_size: int = 512, num_mel_bins: int = 80, **kwargs) -> None:
        self.hidden_size = hidden_size
        self.num_mel_bins = num_mel_bins
        super().__init__(**kwargs)
"""


def _with_audio_tower(model: Path, tower_first: bool) -> None:
    """The copy's package also registers its audio tower's config class (before or after
    the model's own), its model config carries ``audio_model_id``, and its model names
    only the tower's class (it builds the tower's config from it)."""
    package = model.parent
    config = package / "configuration.py"
    text = config.read_text().replace(
        "        tie_word_embeddings: bool = False,\n",
        '        tie_word_embeddings: bool = False,\n        audio_model_id: str = "org/audio",\n',
    )
    text = text.replace(
        "        self.rope_theta = rope_theta\n",
        "        self.rope_theta = rope_theta\n        self.audio_model_id = audio_model_id\n",
    )
    config.write_text(text + AUDIO_CONFIG.format(package=package.name))
    init = package / "__init__.py"
    own = "    AutoConfig.register(ToyLMConfig.model_type, ToyLMConfig, exist_ok=True)\n"
    tower = "    AutoConfig.register(ToyAudioConfig.model_type, ToyAudioConfig, exist_ok=True)\n"
    text = init.read_text().replace(own, tower + own if tower_first else own + tower)
    init.write_text(text.replace("import ToyLMConfig", "import ToyAudioConfig, ToyLMConfig"))


@requires_vllm
@requires_install
@pytest.mark.slow
@pytest.mark.parametrize("tower_first", [True, False])
def test_a_plugin_s_tower_config_is_not_the_model_s(tower_first, worker, tmp_path: Path) -> None:
    """Issue 30: a plugin registering its audio tower's config class beside the model's
    own: the model's class (the one with the ``audio_model_id`` its code reads) is
    synthesised, whichever registers first, and the model builds clean."""
    from prefixlint.introspect import introspect

    tag = "tower_first" if tower_first else "tower_last"
    model = source_copy(
        tmp_path,
        tag,
        _before_model(
            "        self.audio_model_id = config.audio_model_id\n"
            "        self.audio_tower_config = ToyAudioConfig(hidden_size=config.hidden_size)\n"
        ),
    )
    text = model.read_text()
    model.write_text(
        text.replace(
            "\nimport torch\n",
            "\nimport torch\n" + f"from toy_{tag}.configuration import ToyAudioConfig\n",
            1,
        )
    )
    _with_audio_tower(model, tower_first)
    report = introspect(
        f"{model}:{architecture_of(model)}", tp=(1,), pp=(), worker=worker, explore_budget=0
    )
    [result] = report.results
    assert result["config_source"].startswith(f"synthesised (toy_{tag}: "), result
    assert "ToyLMConfig" in result["config_source"], result
    assert result["status"] == "built", result
    found = [(d.code, d.severity.value, d.message) for d in report.diagnostics]
    assert not [f for f in found if f[1] != "note"], found
    # the one PFX600: transformers has no class for a toy plugin to compare with (issue 38)
    assert result["compare"]["reason"] == "no_reference", result["compare"]
    assert len([f for f in found if f[0] == "PFX600"]) == 1, found


AUTO_LOADER = "        return AutoWeightsLoader(self).load_weights(weights)"
PREFIX_IN_CODE = """        return AutoWeightsLoader(self).load_weights(
            (n if n.startswith("lm_head.") else f"model.{n}", w) for n, w in weights
        )"""


@requires_vllm
@requires_install
@pytest.mark.slow
def test_a_loader_that_puts_a_prefix_back_in_code_is_dry_run(worker, tmp_path: Path) -> None:
    """A loader that reads checkpoint names without ``model.`` and prepends it in code (as
    vLLM's EAGLE and DFlash drafts do): the layout derived from the model is refused, the
    loader is asked which shortened names it takes, and the dry-run is verified on them,
    saying so; nothing is reported against the model."""
    from prefixlint.introspect import introspect

    model = source_copy(
        tmp_path,
        "prefix_in_code",
        lambda s: s.replace(
            "        return AutoWeightsLoader(self).load_weights(weights)", PREFIX_IN_CODE
        ),
    )
    report = introspect(
        f"{model}:{architecture_of(model)}", tp=(1,), pp=(), worker=worker, explore_budget=0
    )
    [result] = report.results
    assert result["dryrun"] == "verified", result
    assert "`model.` left out" in result["dryrun_reason"], result
    assert not [d for d in report.diagnostics if d.severity.value != "note"], report.diagnostics


@requires_vllm
@pytest.mark.slow
def test_an_all_reduce_after_a_row_parallel_linear_is_caught(tmp_path: Path) -> None:
    """The static phase's PFX401 (``check --introspect`` runs it beside phase 2)."""
    model = source_copy(
        tmp_path,
        "allreduce",
        lambda s: s.replace(
            "        x, _ = self.down_proj(x)\n",
            "        x, _ = self.down_proj(x)\n        x = tensor_model_parallel_all_reduce(x)\n",
        ).replace(
            "from vllm.distributed import get_pp_group,",
            "from vllm.distributed import get_pp_group, tensor_model_parallel_all_reduce,",
        ),
    )
    done = run_prefixlint("check", "--no-cache", "--format", "json", str(model), cwd=tmp_path)
    found = [(f["code"], f["location"]["row"]) for f in json.loads(done.stdout)]
    assert ("PFX401", line_of(model, "tensor_model_parallel_all_reduce(x)")) in found, found


@requires_vllm
@pytest.mark.slow
def test_pfx304_advice_names_an_attention_layer_vllm_accepts() -> None:
    """PFX304's advice for an attention layer built in a loop inside a decoder layer:
    the suggested name passes vLLM's own ``extract_layer_index``, the list index it warns
    against does not."""
    from prefixlint.rules.pfx304_loop_prefix_without_index import _attention_advice

    advice = _attention_advice("Attention", "{prefix}.attn", ["i"])
    assert "`{prefix}.attn_{i}`" in advice and "`{prefix}.attns.{i}`" in advice
    prefix = "model.layers.3.self_attn"
    probe = (  # vLLM in a process of its own (this one may hold the stdlib's distutils)
        "from vllm.model_executor.models.utils import extract_layer_index as x\n"
        "import sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        print(name, x(name))\n"
        "    except AssertionError as e:\n"
        "        print(name, 'refused', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, f"{prefix}.attn_1", f"{prefix}.attns.1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"{prefix}.attn_1 3" in done.stdout, done.stdout + done.stderr
    assert f"{prefix}.attns.1 refused" in done.stdout and "one integer" in done.stdout


# -- crash verdicts in every command -------------------------------------------------------


@requires_vllm
@pytest.mark.slow
def test_sys_exit_fails_check_introspect_at_its_line(tmp_path: Path) -> None:
    """``sys.exit`` in ``__init__`` is the model's failure (PFX604 at that line, exit 1),
    not a note (it was exit 0) nor a usage error (exit 2)."""
    model = source_copy(tmp_path, "exits", PLANTED["sysexit"][0])
    done = run_prefixlint(
        "check",
        "--no-cache",
        "--introspect",
        "--tp",
        "1",
        "--format",
        "json",
        str(model),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    found = [(f["code"], f["location"]["row"]) for f in json.loads(done.stdout)]
    assert ("PFX604", line_of(model, "sys.exit(3)")) in found, found


@requires_vllm
@pytest.mark.slow
def test_timeout_counts_from_the_build_not_the_worker_start_up() -> None:
    """A timeout shorter than the worker's start-up (importing torch and vLLM) still
    leaves a small model time to build: the clock starts when the worker takes the job."""
    import time

    from prefixlint.introspect import introspect
    from prefixlint.introspect.process.client import Worker

    probe = Worker()
    started = time.monotonic()
    try:
        probe.run({"kind": "list"}, 900)
    finally:
        probe.close()
    start_up = time.monotonic() - started
    timeout = max(start_up / 2, 5.0)  # less than a fresh worker needs to start
    fresh = Worker()
    try:
        report = introspect(
            "LlamaForCausalLM",
            tp=(1,),
            pp=(),
            timeout=timeout,
            worker=fresh,
            dryrun=False,
            explore_budget=0,
        )
    finally:
        fresh.close()
    assert [r["status"] for r in report.results] == ["built"], (start_up, report.diagnostics)


@requires_vllm
@requires_install
@pytest.mark.slow
def test_a_project_folder_named_as_the_package_never_shadows_the_installed_plugin(
    site: Path, tmp_path: Path
) -> None:
    """Run from a plugin's project folder (issue 30's trial): `python -m` would put the
    working folder first on the worker's path, and a folder there named as the plugin's
    package would be imported instead of the installed plugin, whose entry point then has
    no `register`. The worker never has the working folder on its path."""
    work = tmp_path / "project"
    (work / "prefixlint_toy").mkdir(parents=True)
    (work / "prefixlint_toy" / "__init__.py").write_text(
        'raise ImportError("the project folder, not the installed plugin")\n'
    )
    done = run_prefixlint("introspect", ARCHITECTURE, "--tp", "1", "--pp", "1", cwd=work, site=site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the project folder, not the installed plugin" not in done.stdout + done.stderr
    assert "not an architecture" not in done.stderr, done.stderr


@requires_vllm
@requires_install
def test_a_registration_naming_a_missing_class_is_an_error_at_its_line(tmp_path: Path) -> None:
    """Issue 40: ``register()`` names ``module:Class`` and the module has no such class:
    the user's defect, an error at the registration line, exit 1 (it was "not verified ...
    the synthesised config", exit 0)."""
    model = source_copy(tmp_path, "missing")
    init = model.parent / "__init__.py"
    good = '"toy_missing.model:ToyMissingForCausalLM"'
    assert good in init.read_text()
    init.write_text(init.read_text().replace(good, '"toy_missing.model:ToyMisingForCausalLM"'))
    line = line_of(init, "toy_missing.model:ToyMisingForCausalLM")
    site = install(tmp_path / "site", model.parent.parent)
    args = ("introspect", "ToyMissingForCausalLM", "--tp", "1", "--pp", "1", "--no-dryrun")
    done = run_prefixlint(*args, "--format", "json", cwd=tmp_path, site=site, timeout=600)
    assert done.returncode == 1, (done.stdout, done.stderr)
    errors = [f for f in json.loads(done.stdout) if f["severity"] == "error"]
    assert [(Path(f["filename"]).name, f["location"]["row"]) for f in errors] == [
        ("__init__.py", line)
    ], errors
    assert "ToyMisingForCausalLM" in errors[0]["message"]
