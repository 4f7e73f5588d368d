"""Which classes vLLM builds, read from how a package registers and builds its models
(``prefixlint/static/scope.py``), and what the rules make of it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from prefixlint.rules import ALL_RULES
from prefixlint.static.engine import Linter
from prefixlint.static.resolve import ModuleLoader, Resolver
from prefixlint.static.scope import ClassRef, Role, read_scope
from prefixlint.static.scope_units import Scopes, scope_unit

TOY = Path(__file__).parent / "fixtures" / "plugins" / "toy_dist" / "toy_plugin"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def scope_of(*package_dirs: Path):
    unit = scope_unit(list(package_dirs))
    return read_scope(unit, Resolver(ModuleLoader(roots=unit)))


def test_roles_of_the_toy_plugin() -> None:
    scope = scope_of(TOY)
    assert scope.complete and not scope.unread
    role = lambda module, name: scope.role(f"toy_plugin.{module}", name)  # noqa: E731
    assert role("model", "ToyForCausalLM") is Role.ROOT
    assert role("omni", "ToyOmniForConditionalGeneration") is Role.ROOT
    # Registered through the loop over STAGES, and built by ToyOmni as a stage.
    assert role("talker", "ToyTalkerForConditionalGeneration") is Role.STAGE
    assert scope.builder_of("toy_plugin.talker", "ToyTalkerForConditionalGeneration") == (
        ClassRef("toy_plugin.omni", "ToyOmniForConditionalGeneration")
    )
    for name in ("ToyModel", "ToyDecoderLayer", "ToyMLP", "ToyMoE", "ToyAttention"):
        assert role("model", name) is Role.BUILT, name
    # The pipeline its own engine builds: registered nowhere, built by no model.
    assert role("pipeline", "ToyImageTransformer") is Role.OUTSIDE
    # Under ToyForCausalLM, whose decoder keeps its attention in vLLM's Attention.
    assert ClassRef("toy_plugin.model", "ToyMLP") in scope.paged


def test_the_rules_follow_the_roles() -> None:
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[TOY])))
    found = {}
    for path in sorted(TOY.glob("*.py")):
        for d in linter.lint_path(path, path.name):
            found[(path.name, d.code)] = d.severity.value
    assert found[("model.py", "PFX501")] == "error"  # the root lacks the PP method
    assert found[("model.py", "PFX401")] == "error"  # all-reduce after FusedMoEFactory
    assert found[("model.py", "PFX302")] == "error"  # `.model` at the root
    assert found[("model.py", "PFX402")] == "warning"  # `self.Wi = nn.Linear`
    assert found[("talker.py", "PFX501")] == "note"  # a stage: the root carries it
    assert found[("pipeline.py", "PFX303")] == "note"  # another loader's naming
    pfx301 = {
        d.location.row: d.severity.value
        for d in linter.lint_path(TOY / "pipeline.py", "pipeline.py")
        if d.code == "PFX301"
    }
    text = (TOY / "pipeline.py").read_text().splitlines()
    row = lambda needle: next(i for i, t in enumerate(text, 1) if needle in t)  # noqa: E731
    # A component of the pipeline, named from "" by its loader; a quantized layer unnamed.
    assert pfx301 == {row("self.text_encoder ="): "note", row("self.out_proj ="): "error"}


def test_registrations_through_wrappers_tables_and_lazy_strings(tmp_path: Path) -> None:
    """The ways the plugins of the registry register (vllm-factory's wrappers in another
    top-level package, vllm-omni's loop over an imported table, vllm-spark's ``__name__``
    f-string, MERaLiON's ``import_module`` + ``getattr``)."""
    write(
        tmp_path / "factory",
        {
            "pyproject.toml": """
                [project]
                name = "x"
                [project.entry-points."vllm.general_plugins"]
                a = "plug.a:register"
            """,
            "forge/__init__.py": "",
            "forge/registration.py": """
                def register_with_vllm(architecture_name, model_cls):
                    from vllm import ModelRegistry
                    ModelRegistry.register_model(architecture_name, model_cls)

                def register_plugin(model_type, architecture_name, model_cls):
                    register_with_vllm(architecture_name, model_cls)
            """,
            "plug/a/__init__.py": """
                from forge.registration import register_plugin
                from .model import AModel

                def register():
                    register_plugin("a", "AArch", AModel)
            """,
            "plug/a/model.py": "class AModel:\n    pass\n",
        },
    )
    write(
        tmp_path / "omni_dist",
        {
            "omni/__init__.py": "",
            "omni/registry.py": """
                _MODELS = {"BArch": ("b", "b_model", "BModel")}
            """,
            "omni/b/__init__.py": "",
            "omni/b/b_model.py": "class BModel:\n    pass\n",
            "omni/args.py": """
                def register_omni_models_to_vllm():
                    from vllm.model_executor.models import ModelRegistry
                    from omni.registry import _MODELS
                    for arch, (folder, rel, cls) in _MODELS.items():
                        ModelRegistry.register_model(arch, f"omni.{folder}.{rel}:{cls}")
            """,
        },
    )
    write(
        tmp_path / "spark_dist",
        {
            "spark/__init__.py": """
                ARCHITECTURE = "CArch"
                MODEL_TARGET = f"{__name__}.c:{ARCHITECTURE}"

                def register():
                    from vllm import ModelRegistry
                    ModelRegistry.register_model(ARCHITECTURE, MODEL_TARGET)
            """,
            "spark/c.py": "class CArch:\n    pass\n",
        },
    )
    write(
        tmp_path / "mera_dist",
        {
            "mera/__init__.py": """
                from importlib import import_module

                def register():
                    from vllm import ModelRegistry
                    module = import_module("mera.impl")
                    cls = getattr(module, "DModel")
                    ModelRegistry.register_model("DArch", cls)
            """,
            "mera/impl.py": "class DModel:\n    pass\n",
        },
    )
    write(
        tmp_path / "diff_dist",
        {
            "diff/__init__.py": """
                from vllm.model_executor.models.registry import _ModelRegistry
                OwnRegistry = _ModelRegistry({})

                def register():
                    OwnRegistry.register_model("EArch", "diff.e:EModel")
            """,
            "diff/e.py": "class EModel:\n    pass\n",
        },
    )
    # ``plug`` is a namespace folder: ``a`` is the package; the wrapper lives in ``forge``.
    a = scope_of(tmp_path / "factory" / "plug" / "a")
    assert a.registered == {ClassRef("a.model", "AModel"): ("AArch",)}
    assert scope_of(tmp_path / "omni_dist" / "omni").registered == {
        ClassRef("omni.b.b_model", "BModel"): ("BArch",)
    }
    spark = scope_of(tmp_path / "spark_dist" / "spark")
    assert spark.registered == {ClassRef("spark.c", "CArch"): ("CArch",)}
    mera = scope_of(tmp_path / "mera_dist" / "mera")
    assert mera.registered == {ClassRef("mera.impl", "DModel"): ("DArch",)}
    # A registry object of the plugin's own is another loader's, not vLLM's.
    assert not scope_of(tmp_path / "diff_dist" / "diff").known


def test_a_registration_prefixlint_cannot_read_leaves_the_rest_unknown(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "p/__init__.py": """
                def register():
                    from vllm import ModelRegistry
                    ModelRegistry.register_model("PArch", "p.m:PForCausalLM")
                    for name, target in discover_models():
                        ModelRegistry.register_model(name, target)
            """,
            "p/m.py": "class PForCausalLM:\n    pass\n\nclass QForCausalLM:\n    pass\n",
        },
    )
    scope = scope_of(tmp_path / "p")
    assert scope.role("p.m", "PForCausalLM") is Role.ROOT
    assert not scope.complete
    assert scope.role("p.m", "QForCausalLM") is Role.UNKNOWN  # maybe the unread one


def test_a_plugin_class_named_like_a_vllm_architecture_is_not_that_architecture(
    tmp_path: Path,
) -> None:
    """vllm-factory's ``ModernBertModel`` backbone: same name as vLLM's registered
    architecture, built by the plugin's own model, which is what vLLM builds."""
    write(
        tmp_path,
        {
            "fac/__init__.py": """
                def register():
                    from vllm import ModelRegistry
                    ModelRegistry.register_model("ColBertModel", "fac.colbert:ColBert")
            """,
            "fac/backbone.py": """
                from torch import nn

                class ModernBertModel(nn.Module):
                    def forward(self, input_ids, attention_mask=None):
                        return input_ids
            """,
            "fac/colbert.py": """
                from torch import nn
                from vllm.config import VllmConfig
                from .backbone import ModernBertModel

                class ColBert(nn.Module):
                    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
                        super().__init__()
                        self.model = ModernBertModel()

                    def forward(self, input_ids, positions, intermediate_tensors=None,
                                inputs_embeds=None):
                        return self.model(input_ids)
            """,
        },
    )
    backbone = tmp_path / "fac" / "backbone.py"
    scope = scope_of(tmp_path / "fac")
    assert scope.role("fac.backbone", "ModernBertModel") is Role.BUILT
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[tmp_path / "fac"])))
    assert [d.code for d in linter.lint_path(backbone, backbone.name)] == []


def test_scopes_are_read_once_per_distribution(tmp_path: Path) -> None:
    scopes = Scopes(Resolver(ModuleLoader(roots=[TOY])))
    first = scopes.for_file(TOY / "model.py")
    assert first is not None and scopes.for_file(TOY / "talker.py") is first
    assert scopes.for_file(tmp_path / "loose.py") is None  # no package: no scope


@pytest.mark.parametrize("name", ["model.py", "talker.py", "pipeline.py"])
def test_scope_round_trips_through_json(name: str) -> None:
    from prefixlint.static.scope import PackageScope

    scope = scope_of(TOY)
    again = PackageScope.from_json(scope.to_json())
    assert again == scope and again.digest == scope.digest


def test_stages_through_an_alias_and_registrations_vllm_cannot_build(tmp_path: Path) -> None:
    """vllm-omni's Qwen2.5-Omni token2wav: a stage built through an alias of
    ``init_vllm_registered_model``, and a registered DiT its wrapper builds itself, whose
    constructor takes no ``vllm_config`` (the registration is not how it is built)."""
    write(
        tmp_path,
        {
            "om/__init__.py": """
                def register():
                    from vllm import ModelRegistry
                    for arch, target in {
                        "WrapArch": "om.m:Wrapper",
                        "WavArch": "om.m:Wav",
                        "DitArch": "om.m:Dit",
                    }.items():
                        ModelRegistry.register_model(arch, target)
            """,
            "om/m.py": """
                from torch import nn
                from vllm.model_executor.layers.linear import ReplicatedLinear
                from vllm.model_executor.models.utils import (
                    init_vllm_registered_model as build_stage,
                    maybe_prefix,
                )

                class Dit(nn.Module):
                    def __init__(self, config):
                        super().__init__()

                class Wav(nn.Module):
                    def __init__(self, *, vllm_config, prefix: str = ""):
                        super().__init__()
                        self.dit = Dit(vllm_config.model_config.hf_config)

                class Wrapper(nn.Module):
                    def __init__(self, *, vllm_config, prefix: str = ""):
                        super().__init__()
                        self.wav = build_stage(
                            vllm_config=vllm_config,
                            prefix=maybe_prefix(prefix, "wav"),
                            architectures=["WavArch"],
                        )
                        self.head = ReplicatedLinear(8, 8, quant_config=vllm_config.quant_config,
                                                     prefix="head")
            """,
        },
    )
    scope = scope_of(tmp_path / "om")
    assert scope.role("om.m", "Wav") is Role.STAGE
    assert scope.role("om.m", "Dit") is Role.BUILT  # registered, never built by vLLM
    assert scope.role("om.m", "Wrapper") is Role.ROOT
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[tmp_path / "om"])))
    path = tmp_path / "om" / "m.py"
    found = {(d.code, d.severity.value) for d in linter.lint_path(path, path.name)}
    assert ("PFX101", "error") not in found  # Dit is no architecture vLLM builds
    # The root's literal is the derived name today (prefix ""): a warning, not an error.
    assert ("PFX303", "warning") in found and ("PFX303", "error") not in found


def test_an_inner_transformer_and_auxiliary_tables_are_deliberate(tmp_path: Path) -> None:
    """vllm-omni's TTS talkers: the root's decoder uses vLLM's Attention; a code predictor
    of its own (plain layers, SDPA, a per-call cache) and the root's codebook table beside
    its vocab-parallel embedding are replicated by design: notes. The same code in a model
    that never uses vLLM's attention stays a warning."""
    talker = """
        import torch
        import torch.nn.functional as F
        from torch import nn
        from vllm.model_executor.layers.attention import Attention
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

        class PredictorAttention(nn.Module):
            def __init__(self, dim: int):
                super().__init__()
                self.qkv_proj = nn.Linear(dim, 3 * dim)

            def forward(self, x, past_key_values=None):
                q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
                return F.scaled_dot_product_attention(q, k, v)

        class PredictorDecoderLayer(nn.Module):
            def __init__(self, dim: int):
                super().__init__()
                self.self_attn = PredictorAttention(dim)

        class MainAttention(nn.Module):
            def __init__(self, dim: int, prefix: str = ""):
                super().__init__()
                self.attn = Attention(4, dim // 4, 1.0, prefix=f"{prefix}.attn")

        class MainDecoderLayer(nn.Module):
            def __init__(self, dim: int, prefix: str = ""):
                super().__init__()
                self.self_attn = MainAttention(dim, prefix=f"{prefix}.self_attn")

        class TalkerForConditionalGeneration(nn.Module):
            def __init__(self, *, vllm_config, prefix: str = ""):
                super().__init__()
                self.embed_tokens = VocabParallelEmbedding(100, 16, prefix=f"{prefix}.e")
                self.codebook_embeddings = nn.Embedding(8 * 1024, 16)
                self.layer = MainDecoderLayer(16, prefix=f"{prefix}.layer")
                self.predictor = PredictorDecoderLayer(16)
    """
    write(
        tmp_path / "dist",
        {
            "tts/__init__.py": """
                def register():
                    from vllm import ModelRegistry
                    ModelRegistry.register_model(
                        "TalkerArch", "tts.talker:TalkerForConditionalGeneration"
                    )
            """,
            "tts/talker.py": talker,
        },
    )
    write(tmp_path / "loose", {"talker.py": talker})  # no package, no scope

    def found(path: Path) -> dict[tuple[str, int], str]:
        linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[path.parent])))
        return {(d.code, d.location.row): d.severity.value for d in linter.lint_path(path, "t")}

    scoped = found(tmp_path / "dist" / "tts" / "talker.py")
    loose = found(tmp_path / "loose" / "talker.py")
    for key in (("PFX402", 11), ("PFX403", 15), ("PFX402", 36)):
        assert scoped.get(key) == "note", (key, scoped)
    assert loose.get(("PFX402", 11)) == "warning" and loose.get(("PFX403", 15)) == "warning"
    assert scoped.get(("PFX404", 13)) == "note" and loose.get(("PFX404", 13)) == "warning"


def test_a_plugin_package_named_vllm_something_is_not_vllm(tmp_path: Path) -> None:
    """``vllm_acme`` (as vllm_omni, vllm_kunlun) is a plugin, not vLLM: a class it imports
    from another package under a vLLM layer's name (diffusers' ``Attention``) is that
    package's class, which takes no prefix; vLLM's own ``Attention`` still needs one."""
    write(
        tmp_path,
        {
            "vllm_acme/__init__.py": "",
            "vllm_acme/dit.py": """
            from diffusers.models.attention import Attention
            from torch import nn


            class Block(nn.Module):
                def __init__(self, dim: int, prefix: str = ""):
                    super().__init__()
                    self.attn1 = Attention(query_dim=dim, heads=8)
            """,
            "vllm_acme/decoder.py": """
            from torch import nn
            from vllm.attention import Attention


            class Layer(nn.Module):
                def __init__(self, cache_config, prefix: str = ""):
                    super().__init__()
                    self.attn = Attention(8, 64, 1.0, cache_config=cache_config)
            """,
        },
    )
    root = tmp_path / "vllm_acme"
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[root])))
    dit = linter.lint_path(root / "dit.py", "vllm_acme/dit.py")
    assert [d.code for d in dit if d.code.startswith("PFX3")] == []
    decoder = linter.lint_path(root / "decoder.py", "vllm_acme/decoder.py")
    assert [(d.code, d.severity.value) for d in decoder if d.code == "PFX301"] == [
        ("PFX301", "error")
    ]


def test_a_model_built_from_vllms_decoder_keeps_its_own_caches_besides(tmp_path: Path) -> None:
    """A registered talker whose decoder is vLLM's ``Qwen3Model`` (its attention in vLLM's
    paged layers, three classes down in vLLM's code), or vLLM's ``Qwen2ForCausalLM`` built
    by name with ``init_vllm_registered_model``, and that keeps a streaming codec's
    cache besides: that cache is the model's own (a note), not a reference leftover; the
    same cache in a model with no paged attention stays a warning."""
    write(
        tmp_path,
        {
            "tal/__init__.py": """
            def register():
                from vllm import ModelRegistry
                for module, name in [("talker", "Talker"), ("plain", "Plain"), ("stage", "Stage")]:
                    arch = f"{name}ForConditionalGeneration"
                    ModelRegistry.register_model(arch, f"tal.{module}:{arch}")
            """,
            "tal/stage.py": """
            from torch import nn
            from vllm.model_executor.models.utils import init_vllm_registered_model, maybe_prefix


            class StageForConditionalGeneration(nn.Module):
                def __init__(self, *, vllm_config, prefix: str = ""):
                    super().__init__()
                    self.model = init_vllm_registered_model(
                        vllm_config=vllm_config,
                        prefix=maybe_prefix(prefix, "model"),
                        architectures=["Qwen2ForCausalLM"],
                    )

                def local_forward(self, codes, past_key_values=None):
                    return codes, past_key_values
            """,
            "tal/talker.py": """
            from torch import nn
            from vllm.model_executor.models.qwen3 import Qwen3Model


            class TalkerForConditionalGeneration(nn.Module):
                def __init__(self, *, vllm_config, prefix: str = ""):
                    super().__init__()
                    self.model = Qwen3Model(vllm_config=vllm_config, prefix=prefix)

                def stream_codes(self, codes, past_key_values=None):
                    return codes, past_key_values
            """,
            "tal/plain.py": """
            from torch import nn


            class PlainForConditionalGeneration(nn.Module):
                def __init__(self, *, vllm_config, prefix: str = ""):
                    super().__init__()
                    self.proj = nn.Identity()

                def stream_codes(self, codes, past_key_values=None):
                    return codes, past_key_values
            """,
        },
    )
    root = tmp_path / "tal"
    unit = scope_unit([root])
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=unit)))

    def pfx404(name: str) -> list[str]:
        found = linter.lint_path(root / name, f"tal/{name}")
        return [d.severity.value for d in found if d.code == "PFX404"]

    assert pfx404("talker.py") == ["note"]
    assert pfx404("stage.py") == ["note"]  # vLLM's Qwen2ForCausalLM, built by name
    assert pfx404("plain.py") == ["warning"]


def test_layers_in_a_branch_vllm_never_runs_are_not_its_model(tmp_path: Path) -> None:
    """A module that works without vLLM builds plain layers in the ``else:`` of an
    availability flag: no PFX402 there, whether the flag is the module's own or imported
    from a sibling (relative or absolute); a flag that is not vLLM's availability keeps it."""
    layer = """
        from torch import nn
        {flag_import}
        from vllm.model_executor.layers.linear import RowParallelLinear

        class MyDecoderLayer(nn.Module):
            def __init__(self, prefix: str = ""):
                super().__init__()
                if {test}:
                    self.o_proj = RowParallelLinear(8, 8, prefix=f"{{prefix}}.o_proj")
                else:
                    self.o_proj = nn.Linear(8, 8)
    """
    compat = """
        try:
            import vllm  # noqa: F401
            VLLM_AVAILABLE = True
        except ImportError:
            VLLM_AVAILABLE = False
        USE_FAST = True
    """
    variants = {
        "own.py": ("", "VLLM_AVAILABLE"),
        "relative.py": ("from .compat import VLLM_AVAILABLE", "VLLM_AVAILABLE"),
        "absolute.py": ("from plug.compat import VLLM_AVAILABLE as ok", "ok"),
        "module.py": ("from plug import compat", "compat.VLLM_AVAILABLE"),
        "other.py": ("from .compat import USE_FAST", "USE_FAST"),
    }
    files = {"plug/__init__.py": "", "plug/compat.py": compat}
    for name, (flag_import, test) in variants.items():
        text = layer.format(flag_import=flag_import, test=test)
        if name == "own.py":
            text = compat + text
        files[f"plug/{name}"] = text
    write(tmp_path, files)
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[tmp_path / "plug"])))
    flagged = {
        name
        for name in variants
        if any(d.code == "PFX402" for d in linter.lint_path(tmp_path / "plug" / name, name))
    }
    assert flagged == {"other.py"}, flagged


def test_a_roots_layer_swap_named_by_its_path_is_a_warning(tmp_path: Path) -> None:
    """vllm-omni's HunyuanImage3 (issue 30): the registered root replaces each layer's MLP
    after construction, named by a literal that is the layer's path
    (``model.layers.{i}.mlp`` for ``layer.mlp`` in ``enumerate(self.model.layers)``): the
    derived name today, a warning. A literal that is not the path stays an error."""
    model = """
        from torch import nn
        from vllm.model_executor.layers.linear import ReplicatedLinear

        class Layer(nn.Module):
            def __init__(self, quant_config, prefix: str = ""):
                super().__init__()
                self.mlp = ReplicatedLinear(8, 8, quant_config=quant_config,
                                            prefix=f"{prefix}.mlp")

        class Inner(nn.Module):
            def __init__(self, quant_config, prefix: str = ""):
                super().__init__()
                self.layers = nn.ModuleList(
                    [Layer(quant_config, prefix=f"{prefix}.layers.{i}") for i in range(2)]
                )

        class Root(nn.Module):
            def __init__(self, *, vllm_config, prefix: str = ""):
                super().__init__()
                self.quant_config = vllm_config.quant_config
                self.model = Inner(self.quant_config, prefix=f"{prefix}model")
                self._swap()

            def _swap(self):
                for layer_id, layer in enumerate(self.model.layers):
                    layer.mlp = ReplicatedLinear(8, 8, quant_config=self.quant_config,
                                                 prefix=f"NAME")
    """
    register = """
        def register():
            from vllm import ModelRegistry
            ModelRegistry.register_model("RootArch", "om.m:Root")
    """
    found = {}
    for name in ("model.layers.{layer_id}.mlp", "model.blocks.{layer_id}.mlp"):
        root = tmp_path / name.split(".")[1]
        write(root, {"om/__init__.py": register, "om/m.py": model.replace("NAME", name)})
        linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[root / "om"])))
        path = root / "om" / "m.py"
        found[name] = [
            d.severity.value for d in linter.lint_path(path, path.name) if d.code == "PFX303"
        ]
    assert found == {
        "model.layers.{layer_id}.mlp": ["warning"],
        "model.blocks.{layer_id}.mlp": ["error"],
    }


def test_the_decoders_own_attention_written_by_hand_is_an_error(tmp_path: Path) -> None:
    """Issue 40: the decoder's attention class builds vLLM's ``Attention`` (its KV cache)
    and then computes a softmax over ``q @ k^T`` itself: the cache is never written or read,
    so every decode step attends to its own token only. An error that says so, never the
    note of an inner sequence (the talker's code predictor above stays one)."""
    model = """
        import torch
        from torch import nn
        from vllm.model_executor.layers.attention import Attention

        class MoeAttention(nn.Module):
            def __init__(self, dim: int, prefix: str = ""):
                super().__init__()
                self.attn = Attention(4, dim // 4, 1.0, prefix=f"{prefix}.attn")

            def forward(self, q, k, v):
                scores = torch.matmul(q, k.transpose(-1, -2)) * 0.5
                probs = torch.softmax(scores, dim=-1)
                return torch.matmul(probs, v)

        class MoeDecoderLayer(nn.Module):
            def __init__(self, dim: int, prefix: str = ""):
                super().__init__()
                self.self_attn = MoeAttention(dim, prefix=f"{prefix}.self_attn")

        class MoeForCausalLM(nn.Module):
            def __init__(self, *, vllm_config, prefix: str = ""):
                super().__init__()
                self.layer = MoeDecoderLayer(16, prefix=f"{prefix}.layer")
    """
    write(
        tmp_path / "dist",
        {
            "moe/__init__.py": """
                def register():
                    from vllm import ModelRegistry
                    ModelRegistry.register_model("MoeArch", "moe.model:MoeForCausalLM")
            """,
            "moe/model.py": model,
        },
    )
    path = tmp_path / "dist" / "moe" / "model.py"
    linter = Linter(ALL_RULES, Resolver(ModuleLoader(roots=[path.parent.parent])))
    [found] = [d for d in linter.lint_path(path, "m") if d.code == "PFX403"]
    assert found.severity.value == "error", found.message
    assert "`self.attn`" in found.message and "KV cache" in found.message, found.message
    assert "codebooks" not in found.message
