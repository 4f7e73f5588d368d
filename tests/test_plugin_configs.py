"""Which config class phase 2 synthesises for a plugin's model (issue 30): a plugin that
registers its audio tower's config class beside the model's own got the tower's as the
whole model's config (``AttributeError: audio_model_id``). The model's own class is the one
its shipped ``config.json`` names, the one its code ties to ``hf_config``, or the one that
has the attributes its code reads there; never a tower's config held inside another."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

CONFIGS = """
from transformers import PretrainedConfig


class TowerAudioConfig(PretrainedConfig):
    model_type = "{pkg}_audio"

    def __init__(self, hidden_size=64, num_hidden_layers=2, num_mel_bins=80, **kwargs):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_mel_bins = num_mel_bins
        super().__init__(**kwargs)


class TowerLMConfig(PretrainedConfig):
    model_type = "{pkg}"

    def __init__(self, hidden_size=64, num_hidden_layers=2, vocab_size=256,
                 audio_model_id="org/audio", audio_config=None, **kwargs):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.vocab_size = vocab_size
        self.audio_model_id = audio_model_id
        self.audio_config = TowerAudioConfig(**(audio_config or {{}}))
        super().__init__(**kwargs)
"""

# The model names only the tower's class (it builds the tower from it); it reads its own
# config through vLLM's ``hf_config`` without naming that class.
MODEL = """
from .configuration import TowerAudioConfig


class AudioTower:
    def __init__(self, config: TowerAudioConfig) -> None:
        self.bins = config.num_mel_bins


class TowerForCausalLM:
    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        config = vllm_config.model_config.hf_config
        self.config = config
        self.audio_model_id = config.audio_model_id
        self.tower = AudioTower(TowerAudioConfig(hidden_size=config.hidden_size))

    def compute_logits(self):
        return self.config.vocab_size
"""


def _package(tmp_path: Path, tag: str, model: str = MODEL, shipped: dict | None = None):
    """A plugin package ``tower_<tag>`` on ``sys.path``: its config classes (the model's and
    the tower's) and its model class."""
    pkg = f"tower_{tag}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "configuration.py").write_text(CONFIGS.format(pkg=pkg))
    (root / "model.py").write_text(textwrap.dedent(model))
    if shipped is not None:
        (root / "config.json").write_text(json.dumps(shipped))
    sys.path.insert(0, str(tmp_path))
    try:
        configuration = importlib.import_module(f"{pkg}.configuration")
        model_module = importlib.import_module(f"{pkg}.model")
    finally:
        sys.path.remove(str(tmp_path))
    return pkg, configuration, model_module


def _candidates(pkg: str, configuration, tower_first: bool) -> dict[str, type]:
    own = {pkg: configuration.TowerLMConfig}
    tower = {f"{pkg}_audio": configuration.TowerAudioConfig}
    return {**tower, **own} if tower_first else {**own, **tower}


@pytest.mark.parametrize("tower_first", [True, False])
def test_the_class_whose_attributes_the_model_reads_is_chosen(tmp_path: Path, tower_first):
    """The tower's class, registered first or last and the only one the module names, is
    not the model's config: it lacks ``audio_model_id``, which the model reads."""
    from prefixlint.introspect.targets.plugins import _choose

    pkg, configuration, model = _package(tmp_path, f"reads_{int(tower_first)}")
    candidates = _candidates(pkg, configuration, tower_first)
    assert _choose("TowerForCausalLM", model.TowerForCausalLM, candidates) == pkg


def test_the_class_the_code_ties_to_hf_config_is_chosen(tmp_path: Path) -> None:
    """An annotation of ``hf_config`` says the class, whatever the attributes read."""
    annotated = MODEL.replace(
        "        config = vllm_config.model_config.hf_config\n",
        "        config: TowerLMConfig = vllm_config.model_config.hf_config\n",
    ).replace("import TowerAudioConfig", "import TowerAudioConfig, TowerLMConfig")
    from prefixlint.introspect.targets.plugins import _choose

    pkg, configuration, model = _package(tmp_path, "annotated", annotated)
    candidates = _candidates(pkg, configuration, True)
    assert _choose("TowerForCausalLM", model.TowerForCausalLM, candidates) == pkg


def test_the_model_type_of_a_shipped_config_is_chosen(tmp_path: Path) -> None:
    """A ``config.json`` the package ships for the architecture names the model type."""
    from prefixlint.introspect.targets.plugins import _choose

    pkg = "tower_shipped"
    shipped = {"model_type": pkg, "architectures": ["TowerForCausalLM"]}
    pkg, configuration, model = _package(tmp_path, "shipped", shipped=shipped)
    candidates = _candidates(pkg, configuration, True)
    assert _choose("TowerForCausalLM", model.TowerForCausalLM, candidates) == pkg


def test_a_tower_held_inside_another_candidate_is_not_chosen(tmp_path: Path) -> None:
    """Nothing read says which: the class whose instance holds the other's is the model's."""
    from prefixlint.introspect.targets.plugins import _choose

    silent = (
        "class TowerForCausalLM:\n    def __init__(self, *, vllm_config, prefix=''):\n"
        "        pass\n"
    )
    pkg, configuration, model = _package(tmp_path, "silent", silent)
    candidates = _candidates(pkg, configuration, True)
    assert _choose("TowerForCausalLM", model.TowerForCausalLM, candidates) == pkg
