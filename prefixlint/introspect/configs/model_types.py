"""What an architecture's config is: its model type (vLLM's own table first, then
transformers' auto mappings, then what the model's module and classes say) and the
config class of that type (vLLM's ``transformers_utils.configs`` first, then
transformers' ``CONFIG_MAPPING``). No network: nothing is fetched from the hub."""

from __future__ import annotations

import re
from typing import Any


def vllm_config_registry() -> Any:
    """vLLM's model type -> config class table (private: ``_CONFIG_REGISTRY`` in vLLM 0.32's
    ``transformers_utils.config``); empty where a release moved it, so synthesis falls
    back on transformers' classes alone."""
    from prefixlint.introspect.vllm_api import config_registry

    return config_registry()


def vllm_architecture_types() -> dict[str, str]:
    """vLLM's architecture -> model type table (private: ``_ARCHITECTURE_TO_MODEL_TYPE``);
    empty where a release moved it (transformers' mappings still answer)."""
    from prefixlint.introspect.vllm_api import architecture_model_types

    return architecture_model_types()


_ARCH_SUFFIX = re.compile(
    r"(For[A-Z]\w*|Model|LMHeadModel|MTP\w*|Chat\w*Model)$",
)


def norm_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _known_model_types() -> dict[str, str]:
    """normalised model type -> model type, for every config class vLLM or transformers
    can load without remote code."""
    from transformers import CONFIG_MAPPING

    config_registry = vllm_config_registry()

    out: dict[str, str] = {}
    for mt in [*config_registry, *CONFIG_MAPPING.keys()]:
        out.setdefault(norm_name(mt), mt)
    return out


def _module_config_types(model_cls: type | None) -> list[str]:
    """Model types of the config classes the model's own module imports or defines, whose
    name (less ``Config``) starts the architecture's class name: the model's code says
    which config it reads (``ChatGLMConfig`` for ``ChatGLMModel``, ``NemotronHConfig`` for
    ``NemotronHPuzzleForCausalLM``)."""
    import sys

    if model_cls is None:
        return []
    module = sys.modules.get(model_cls.__module__)
    if module is None:
        return []
    known = _known_model_types()
    out = []
    for value in vars(module).values():
        name = getattr(value, "__name__", "")
        if not (isinstance(value, type) and name.endswith("Config") and len(name) > 7):
            continue
        mt = getattr(value, "model_type", None)
        stem = norm_name(name[: -len("Config")])
        if (
            isinstance(mt, str)
            and norm_name(mt) in known
            and norm_name(model_cls.__name__).startswith(stem)
            and mt not in out
        ):
            out.append(mt)
    return out


def _text_only(model_type: str) -> bool:
    try:
        cls = config_class(model_type)
    except Exception:
        return True
    return not getattr(cls, "sub_configs", None)


def arch_to_model_types(arch: str, model_cls: type | None = None) -> list[str]:
    from transformers.models.auto import modeling_auto

    arch_types = vllm_architecture_types()

    out: list[str] = []
    if arch in arch_types:
        out.append(arch_types[arch])
    for name in dir(modeling_auto):
        if not name.endswith("_MAPPING_NAMES"):
            continue
        for mt, cls in getattr(modeling_auto, name).items():
            matches = arch == cls or (isinstance(cls, (tuple, list)) and arch in cls)
            if matches and mt not in out:
                out.append(mt)
    if arch.endswith("ForCausalLM") and len(out) > 1:
        # A causal LM of a family that also has a composite (vision + text) config reads
        # the text config's attributes at the top level (Llama4ForCausalLM).
        out.sort(key=lambda mt: not _text_only(mt))
    if not out:
        # Architectures no mapping lists: a config class vLLM or transformers knows under
        # the architecture's own name (Step3p5ForCausalLM -> step3p5), then the one the
        # model's module imports.
        # transformers' names follow ``<Type>ForCausalLM``; its other classes of the same
        # stem are other families (``ernie`` is BERT-like, ErnieMTPModel is not).
        config_registry = vllm_config_registry()

        stem = norm_name(_ARCH_SUFFIX.sub("", arch))
        known = _known_model_types()
        if stem in known and (arch.endswith("ForCausalLM") or known[stem] in config_registry):
            out.append(known[stem])
        for mt in _module_config_types(model_cls):
            if mt not in out:
                out.append(mt)
    if not out and not arch.endswith("ForCausalLM"):
        # (a causal LM that reuses another family's class, DeepseekForCausalLM over
        # DeepSeek-V2's, reads its own checkpoint format: the llama-shaped guess and
        # the repair loop fit it better than the base family's defaults)
        out.extend(_base_model_types(model_cls))
    return out


def _base_model_types(model_cls: type | None) -> list[str]:
    """A model class that extends another architecture's class (a retrieval head over
    a vision-language model, a ColBERT head over an encoder) reads that class's config:
    the model types of its nearest base that has one."""
    for base in getattr(model_cls, "__mro__", ())[1:]:
        if "model_executor.models" not in getattr(base, "__module__", ""):
            continue
        found = arch_to_model_types(base.__name__, base)
        if found:
            return found
    backbones = _backbones(model_cls)
    if len(backbones) == 1:  # several (an audio tower beside a language model): ambiguous
        return arch_to_model_types(backbones[0].__name__, backbones[0])
    return []


def _backbones(model_cls: type | None) -> list[type]:
    """Model classes the model's ``__init__`` builds with its own ``vllm_config``
    (``self.model = Lfm2Model(vllm_config=vllm_config, ...)``): they read its config."""
    import ast
    import inspect
    import sys
    import textwrap

    init = getattr(model_cls, "__init__", None)
    module = sys.modules.get(getattr(model_cls, "__module__", ""))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):
        return []
    out: list[type] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        passes_config = any(
            kw.arg == "vllm_config" and isinstance(kw.value, ast.Name) for kw in node.keywords
        )
        found = getattr(module, node.func.id, None)
        # a model (``Lfm2Model``), not a modality tower (``...WhisperEncoder``) that
        # reads its own sub-config out of the same vllm_config
        backbone = isinstance(found, type) and _ARCH_SUFFIX.search(found.__name__)
        if passes_config and backbone and found is not model_cls and found not in out:
            out.append(found)
    return out


def config_class(model_type: str):
    from transformers import CONFIG_MAPPING

    config_registry = vllm_config_registry()

    if model_type in config_registry:
        return config_registry[model_type]
    return CONFIG_MAPPING[model_type]


def exactly_mapped(arch: str) -> bool:
    """vLLM or transformers map ``arch`` to a model type (not a guess from its name)."""
    from transformers.models.auto import modeling_auto

    arch_types = vllm_architecture_types()

    if arch in arch_types:
        return True
    for name in dir(modeling_auto):
        if name.endswith("_MAPPING_NAMES"):
            for cls in getattr(modeling_auto, name).values():
                if arch == cls or (isinstance(cls, (tuple, list)) and arch in cls):
                    return True
    return False


def causal_lm_named(model_type: str) -> str | None:
    """vLLM's ``<Type>ForCausalLM`` for a model type (``step3p5`` -> Step3p5ForCausalLM)."""
    if not model_type:
        return None
    try:
        from vllm.model_executor.models.registry import ModelRegistry

        archs = ModelRegistry.get_supported_archs()
    except Exception:
        return None
    for arch in archs:
        if arch.endswith("ForCausalLM") and norm_name(arch[: -len("ForCausalLM")]) == norm_name(
            model_type
        ):
            return arch
    return None


def causal_lm_of(model_type: str | None) -> str | None:
    """vLLM's registered causal LM architecture for ``model_type``, or None."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from vllm import ModelRegistry

    arch_types = vllm_architecture_types()

    if not model_type:
        return None
    supported = set(ModelRegistry.get_supported_archs())
    names = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)]
    names += [a for a, mt in arch_types.items() if mt == model_type]
    for name in names:
        if isinstance(name, str) and name in supported and name.endswith("ForCausalLM"):
            return name
    return None
