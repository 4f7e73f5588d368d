"""Which configs vLLM derives an MTP draft from, read from vLLM's own code.

An MTP head has no checkpoint of its own: vLLM's ``SpeculativeConfig`` loads the target's
``config.json`` and ``hf_config_override`` rewrites it into the draft's
(``model_type == "glm5_next"`` -> ``architectures = ["Glm5NextMTPModel"]``). A draft
whose target config is not of a model type that function knows fails with
"Unsupported speculative method: 'mtp'". The model types and architectures it tests are
read from its source here (stdlib ``ast``), so a new MTP family needs no table in
prefixlint; a vLLM without that function yields nothing, and the caller falls back to the
targets named like the draft.

Runs inside the worker (imports vLLM).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import json
import re
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from prefixlint.introspect.drafts.mtp_layers import MTP_COUNT_KEYS, add_mtp_layer_lists

_MODEL_TYPE = re.compile(r"^[a-z][a-z0-9_]*$")


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _assigned_model_types(body: list[ast.stmt]) -> set[str]:
    """``X.model_type = "..."`` in a block (not in nested blocks' tests)."""
    out: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
                continue
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "model_type":
                    out.add(str(node.value.value))
    return out


def triggers_in(source: str, arch: str) -> set[str]:
    """The strings (model types, architecture names) in the tests of the ``if`` blocks
    that name ``arch``, followed back through blocks that set ``model_type`` to one of
    them (``pangu_ultra_moe`` -> ``pangu_ultra_moe_mtp`` -> ``OpenPanguMTPModel``)."""
    tree = ast.parse(textwrap.dedent(source))
    blocks = [(n, _strings(n.test)) for n in ast.walk(tree) if isinstance(n, ast.If)]
    found: set[str] = set()
    for node, tests in blocks:
        body = ast.Module(body=node.body, type_ignores=[])
        if arch in _strings(body):
            found |= tests
    changed = True
    while changed:
        changed = False
        for node, tests in blocks:
            if _assigned_model_types(node.body) & found and not tests <= found:
                found |= tests
                changed = True
    found.discard(arch)
    return found


@functools.lru_cache(maxsize=1)
def _override_source() -> str:
    from prefixlint.introspect.vllm_api import speculative_override_source

    # another vLLM layout: "", no triggers, the name-based targets remain
    return speculative_override_source()


def override_types() -> set[str]:
    """Every string hf_config_override tests: a config of one of these types is
    rewritten into an MTP draft's by vLLM."""
    source = _override_source()
    try:
        tree = ast.parse(textwrap.dedent(source)) if source else None
    except SyntaxError:
        return set()
    if tree is None:
        return set()
    return {t for n in ast.walk(tree) if isinstance(n, ast.If) for t in _strings(n.test)}


def override_triggers(arch: str) -> set[str]:
    source = _override_source()
    if not source:
        return set()
    try:
        return triggers_in(source, arch)
    except SyntaxError:
        return set()


def model_types(triggers: set[str]) -> list[str]:
    """The triggers that look like model types (``glm5_next``), sorted: those without an
    ``_mtp`` suffix first (a target's type, not a standalone MTP checkpoint's)."""
    out = [t for t in triggers if _MODEL_TYPE.match(t)]
    return sorted(out, key=lambda t: (t.endswith("_mtp"), t))


def archs_of_types(types: list[str], archs: list[str]) -> list[str]:
    """Registry architectures whose config is of one of ``types`` (vLLM's and
    transformers' architecture -> model type tables), in the order of ``types``."""
    from transformers.models.auto import modeling_auto

    from prefixlint.introspect.configs import vllm_architecture_types

    arch_types = vllm_architecture_types()

    by_type: dict[str, list[str]] = {}
    for a, mt in arch_types.items():
        by_type.setdefault(mt, []).append(a)
    for name in dir(modeling_auto):
        if name.endswith("_MAPPING_NAMES"):
            for mt, cls in getattr(modeling_auto, name).items():
                names = cls if isinstance(cls, (tuple, list)) else [cls]
                by_type.setdefault(mt, []).extend(names)
    out: list[str] = []
    for mt in types:
        found = sorted(set(by_type.get(mt, ())) & set(archs))
        found.sort(key=lambda a: (not a.endswith("ForCausalLM"), len(a)))
        out += [a for a in found if a not in out]
    return out


def synth_of_type(model_type: str, arch: str, num_layers: int = 4) -> str:
    """A folder with a small config of ``model_type`` (the config class's defaults,
    shrunk as synthesis shrinks them), ``architectures = [arch]``. What the class's
    validator demands (two sizes equal, a stated value) is given as synthesis gives it
    (``configs.synthesis.construct``), as a checkpoint has it."""
    from prefixlint.introspect.configs import config_class, construct, shrink_kwargs

    cls = config_class(model_type)
    default = cls()
    kw = _keep_zeros(shrink_kwargs(default, num_layers), default.to_dict())
    # Sub-configs a default leaves None (an assistant's ``text_config``): a checkpoint
    # has them; their class's defaults, shrunk.
    for key, sub_cls in (getattr(cls, "sub_configs", None) or {}).items():
        if getattr(default, key, None) is None and isinstance(sub_cls, type):
            with contextlib.suppress(Exception):
                sub = _sub_config_class(cls, sub_cls, model_type)()
                values = {
                    **sub.to_dict(),
                    **_keep_zeros(shrink_kwargs(sub, num_layers), sub.to_dict()),
                }
                kw[key] = _trim_layer_maps(values)
    cfg = construct(cls, kw)
    cfg.architectures = [arch]
    folder = tempfile.mkdtemp(prefix="prefixlint-config-")
    cfg.save_pretrained(folder)
    return folder


def _keep_zeros(kw: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A size the config class defaults to 0 means "none" (no RoPE part, no index
    heads): shrinking never turns it on."""
    out = {}
    for k, v in kw.items():
        d = defaults.get(k)
        if isinstance(v, dict) and isinstance(d, dict):
            out[k] = {x: y for x, y in v.items() if not (d.get(x) == 0 and y)}
        elif not (isinstance(d, int) and not isinstance(d, bool) and d == 0 and v):
            out[k] = v
    return out


def _trim_layer_maps(values: dict[str, Any]) -> dict[str, Any]:
    """Per-layer maps keyed by layer index (``per_layer_config``) keep the layers the
    shrunk config has."""
    n = values.get("num_hidden_layers")
    if not isinstance(n, int):
        return values
    out = dict(values)
    for k, v in values.items():
        if isinstance(v, dict) and v and all(str(x).isdigit() for x in v):
            out[k] = {x: y for x, y in v.items() if int(x) < n}
    return out


def _sub_config_class(cls: type, sub_cls: type, model_type: str) -> type:
    """A sub-config declared as ``AutoConfig`` (an assistant's ``text_config``): the
    config class of the model type the parent's source names for it, of the parent's
    family (``gemma4_text`` for ``gemma4_assistant``)."""
    from prefixlint.introspect.configs import config_class

    if sub_cls.__name__ != "AutoConfig":
        return sub_cls
    family = model_type.split("_")[0]
    try:
        names = _strings(ast.parse(textwrap.dedent(inspect.getsource(cls))))
    except (OSError, TypeError, SyntaxError):
        return sub_cls
    for name in sorted(names):
        if name != model_type and name.startswith(family) and _MODEL_TYPE.match(name):
            with contextlib.suppress(Exception):
                return config_class(name)
    return sub_cls


def has_config_class(model_type: str) -> bool:
    from prefixlint.introspect.configs import config_class

    try:
        config_class(model_type)
    except Exception:
        return False
    return True


# A checkpoint that ships MTP layers says how many; a default config says 0 or nothing.


def sections_in(source: str, arch: str) -> list[str]:
    """Where the blocks that name ``arch`` read the MTP layer count: MTP sections
    (``getattr(hf_config, "mtp_config", None)``) and sub-configs named by the variable
    that reads a count (``text_config.num_nextn_predict_layers``): a checkpoint with MTP
    layers has them."""
    tree = ast.parse(textwrap.dedent(source))
    out: list[str] = []
    for node in ast.walk(tree):
        body = ast.Module(body=node.body, type_ignores=[]) if isinstance(node, ast.If) else None
        if body is None or arch not in _strings(body):
            continue
        for n in ast.walk(body):
            name = ""
            if isinstance(n, ast.Attribute) and n.attr in MTP_COUNT_KEYS:
                name = getattr(n.value, "id", "")
            elif (
                isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "getattr"
                and len(n.args) >= 2
                and isinstance(n.args[1], ast.Constant)
                and isinstance(n.args[1].value, str)
            ):
                key = n.args[1].value
                if "mtp" in key and key.endswith("config"):
                    name = key
                elif key in MTP_COUNT_KEYS:
                    name = getattr(n.args[0], "id", "")
            if name and name != "hf_config" and name not in out:
                out.append(name)
    return out


def mtp_sections(arch: str) -> list[str]:
    source = _override_source()
    try:
        return sections_in(source, arch) if source else []
    except SyntaxError:
        return []


def with_mtp_layers(folder: str, sections: list[str] | tuple[str, ...] = ()) -> None:
    """The config.json in ``folder`` says it has one MTP layer (a default config has
    none: a config without MTP weights, from which vLLM derives no draft). Counts at the
    top level, in sub-configs, and in the MTP ``sections`` vLLM reads (``mtp_config``,
    absent or None in a default config)."""
    path = Path(folder) / "config.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for key in sections:
        if "mtp" in key and not isinstance(data.get(key), dict):
            data[key] = {}
        section = data.get(key)
        if isinstance(section, dict) and not any(k in section for k in MTP_COUNT_KEYS):
            section["num_nextn_predict_layers"] = 1
    for key, value in list(data.items()):
        if "mtp" in key.lower() and key.endswith("config") and value is None:
            data[key] = value = {}
        mtp_section = "mtp" in key.lower() and isinstance(value, dict)
        if mtp_section and not any(value.get(k) for k in MTP_COUNT_KEYS):
            value["num_nextn_predict_layers"] = 1
    for config in [data, *(v for v in data.values() if isinstance(v, dict))]:
        for key in MTP_COUNT_KEYS:
            if key in config and not config[key]:
                config[key] = 1
        if any(config.get(k) for k in MTP_COUNT_KEYS):
            add_mtp_layer_lists(config, 1)
    if not any(k in data for k in MTP_COUNT_KEYS):
        data["num_nextn_predict_layers"] = 1
        add_mtp_layer_lists(data, 1)
    path.write_text(json.dumps(data), encoding="utf-8")
