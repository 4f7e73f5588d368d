"""Reading a real checkpoint's layout without its weights (``prefixlint/introspect/
checkpoint.py``), the ``[tool.prefixlint.checkpoints]`` table, and the command line's
refusals. The checkpoints are tiny real ones written here (``tests/tiny_checkpoints.py``);
no network is used: a hub id is refused before a connection is tried, or against a local
port that refuses at once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from prefixlint.cli import EXIT_ERROR, main
from prefixlint.config import ConfigError, load_checkpoints_table, load_config
from prefixlint.introspect.targets import checkpoint as ck
from tests import tiny_checkpoints

pytest.importorskip("safetensors")
pytest.importorskip("torch")
pytest.importorskip("transformers")


def state_dict_layout(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """What the files hold, read with safetensors' torch loader (which reads the data)."""
    from safetensors.torch import load_file

    names = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float8_e4m3fn": "F8_E4M3"}
    out = {}
    for file in folder.glob("*.safetensors"):
        for name, tensor in load_file(file).items():
            out[name] = (tuple(tensor.shape), names[str(tensor.dtype)])
    return out


@pytest.mark.parametrize("kind", ["plain", "fp8", "compressed"])
def test_a_single_file_is_read_from_its_header(tmp_path, kind) -> None:
    folder = tiny_checkpoints.write(tmp_path / kind, kind)
    found = ck.read(str(folder))
    assert found.files == ["model.safetensors"]
    assert found.tensors == state_dict_layout(folder)
    assert (
        found.quant_method == {"plain": "", "fp8": "fp8", "compressed": "compressed-tensors"}[kind]
    )
    if kind == "fp8":  # as real FP8 checkpoints store them
        assert found.tensors["model.layers.0.self_attn.q_proj.weight"][1] == "F8_E4M3"
        assert found.tensors["model.layers.0.self_attn.q_proj.weight_scale"] == ((), "F32")
        assert found.tensors["model.layers.0.mlp.down_proj.weight"][1] == "BF16"


def test_a_sharded_checkpoint_is_read_through_its_index(tmp_path) -> None:
    single = ck.read(str(tiny_checkpoints.write(tmp_path / "one", "fp8")))
    folder = tiny_checkpoints.write(tmp_path / "three", "fp8", shards=3)
    # a duplicate the index does not list (Mistral repositories ship consolidated files)
    (folder / "consolidated.safetensors").write_bytes(
        (tmp_path / "one/model.safetensors").read_bytes()
    )
    sharded = ck.read(str(folder))
    assert len(sharded.files) == 3 and "consolidated.safetensors" not in sharded.files
    assert sharded.tensors == single.tensors


def test_the_header_parser_agrees_with_safetensors_and_needs_no_data(tmp_path) -> None:
    folder = tiny_checkpoints.write(tmp_path / "fp8", "fp8")
    file = folder / "model.safetensors"
    assert ck.parse_header(file) == ck._header_by_safetensors(file)
    # the header alone: the 8-byte length and the JSON, every tensor's data cut off
    data = file.read_bytes()
    length = int.from_bytes(data[:8], "little")
    headers_only = tmp_path / "headers.safetensors"
    headers_only.write_bytes(data[: 8 + length])
    assert ck.parse_header(headers_only) == ck.parse_header(file)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 4), "safetensors"),
        (lambda f: (f / "model.safetensors").write_bytes(b"\xff" * 16), "safetensors"),
        (lambda f: (f / "config.json").unlink(), "no config.json"),
        (lambda f: (f / "config.json").write_text("{"), "not valid JSON"),
        (lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"), "pickled weights"),
        (
            lambda f: (f / ck.INDEX_NAME).write_text(json.dumps({"weight_map": {"x": "gone.st"}})),
            "not there",
        ),
        (
            lambda f: (f / ck.INDEX_NAME).write_text(
                json.dumps({"weight_map": {"not.held": "model.safetensors"}})
            ),
            "do not hold",
        ),
    ],
    ids=["short", "garbage", "no-config", "bad-config", "bin-only", "index-file", "index-name"],
)
def test_a_broken_checkpoint_is_a_clear_error(tmp_path, damage, says) -> None:
    folder = tiny_checkpoints.write(tmp_path / "ckpt", "plain")
    damage(folder)
    with pytest.raises(ck.CheckpointError, match=says):
        ck.read(str(folder))


def test_a_hub_manifest_reads_like_the_checkpoint(tmp_path) -> None:
    """What a hub fetch writes (config.json and the headers' layout) is read back as the
    checkpoint itself."""
    local = ck.read(str(tiny_checkpoints.write(tmp_path / "local", "fp8")))
    folder = ck.write_manifest(
        str(tmp_path / "hub"),
        "org/tiny-fp8",
        (tmp_path / "local/config.json").read_text(),
        local.files,
        local.tensors,
    )
    hub = ck.read(folder)
    assert (hub.source, hub.tensors, hub.config) == ("org/tiny-fp8", local.tensors, local.config)


def test_the_build_config_drops_only_the_quantization_config(tmp_path) -> None:
    found = ck.read(str(tiny_checkpoints.write(tmp_path / "fp8", "fp8")))
    folder = ck.build_config(found)
    built = json.loads(Path(folder, "config.json").read_text())
    assert "quantization_config" not in built and "quantization_config" in found.config
    assert {k: v for k, v in found.config.items() if k != "quantization_config"} == built
    assert ck.build_config(found) == folder  # the same config, the same folder


@pytest.fixture
def no_proxy(monkeypatch):
    for name in ("https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_a_hub_id_is_refused_with_the_hub_switched_off(monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ck.CheckpointError, match=r"HF_HUB_OFFLINE.*local folder"):
        ck.resolve("org/some-model")


def test_a_hub_id_is_refused_where_the_hub_cannot_be_reached(monkeypatch, no_proxy) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # refused at once
    with pytest.raises(ck.CheckpointError, match=re.escape("no connection to http://127.0.0.1:9")):
        ck.resolve("org/some-model@main")


def test_a_path_that_is_neither_folder_nor_hub_id_is_refused(tmp_path) -> None:
    with pytest.raises(ck.CheckpointError, match="no such folder"):
        ck.resolve(str(tmp_path / "missing" / "deeper" / "still"))


def invoke(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_the_command_refuses_an_unreachable_hub_id_with_exit_2(monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = invoke(["introspect", "LlamaForCausalLM", "--checkpoint", "org/some-model"])
    assert result.exit_code == EXIT_ERROR
    assert "as a hub id it cannot be read" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["check", "--checkpoint", "x", "."], "only apply with --introspect"),
        (
            ["introspect", "LlamaForCausalLM", "--checkpoint", "x", "--no-dryrun"],
            "drop --no-dryrun",
        ),
        (["introspect", "LlamaForCausalLM", "--checkpoint", "./no/such"], "no such folder"),
    ],
    ids=["check-without-introspect", "no-dryrun", "missing-folder"],
)
def test_checkpoint_options_that_cannot_work_are_usage_errors(args, says) -> None:
    result = invoke(args)
    assert result.exit_code == EXIT_ERROR and says in result.output, result.output


def pyproject(folder: Path, table: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(f"[tool.prefixlint.checkpoints]\n{table}\n")
    return path


def test_the_checkpoints_table_takes_folders_and_hub_ids(tmp_path) -> None:
    tiny_checkpoints.write(tmp_path / "ckpt", "plain")
    pyproject(tmp_path, 'LlamaForCausalLM = "ckpt"\nQwen2ForCausalLM = "Qwen/Qwen2.5-0.5B"')
    load_config(tmp_path / "pyproject.toml")  # valid for every command
    table, base = load_checkpoints_table(tmp_path)
    assert table == {"LlamaForCausalLM": "ckpt", "Qwen2ForCausalLM": "Qwen/Qwen2.5-0.5B"}
    assert base == str(tmp_path)


@pytest.mark.parametrize(
    ("entry", "says"),
    [('LlamaForCausalLM = "no_such_folder"', "is not a folder"), ("LlamaForCausalLM = 3", "got 3")],
)
def test_a_bad_checkpoints_entry_is_a_config_error(tmp_path, entry, says) -> None:
    pyproject(tmp_path, entry)
    with pytest.raises(ConfigError, match=says):
        load_config(tmp_path / "pyproject.toml")


def test_each_class_gets_the_checkpoint_of_its_architecture(tmp_path) -> None:
    explicit = tiny_checkpoints.write(tmp_path / "llama", "plain")
    other = tiny_checkpoints.write(tmp_path / "other", "fp8")
    pyproject(tmp_path, 'Qwen2ForCausalLM = "other"')

    def table_for(path):
        return load_checkpoints_table(tmp_path)

    chosen = ck.Checkpoints(str(explicit), table_for)
    chosen.check(["LlamaForCausalLM", "LlamaModel"])
    assert chosen.for_class(None, "LlamaForCausalLM") == str(explicit)
    assert chosen.for_class(None, "Qwen2ForCausalLM") == str(other)
    assert chosen.for_class(None, "MistralForCausalLM") is None
    with pytest.raises(ck.CheckpointError, match="is one of LlamaForCausalLM"):
        chosen.check(["Qwen2ForCausalLM"])


def test_a_quantization_config_beside_config_json_is_read_as_vllm_reads_it(tmp_path) -> None:
    """ModelOpt 0.29 and before wrote ``hf_quant_config.json`` beside config.json; vLLM
    takes it when config.json has none, and so does the checkpoint reader."""
    folder = tiny_checkpoints.write(tmp_path / "ckpt", "plain")
    legacy = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}
    (folder / ck.LEGACY_QUANT_NAME).write_text(json.dumps(legacy))
    assert ck.read(str(folder)).quantization == legacy
    fp8 = tiny_checkpoints.write(tmp_path / "fp8", "fp8")  # config.json's own wins
    (fp8 / ck.LEGACY_QUANT_NAME).write_text(json.dumps(legacy))
    assert ck.read(str(fp8)).quant_method == "fp8"


def test_a_broken_manifest_is_a_clear_error(tmp_path) -> None:
    folder = tiny_checkpoints.write(tmp_path / "ckpt", "plain")
    (folder / ck.MANIFEST_NAME).write_text(json.dumps({"tensors": {"a": 3}}))
    with pytest.raises(ck.CheckpointError, match="not a checkpoint manifest"):
        ck.read(str(folder))
