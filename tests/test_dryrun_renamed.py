"""The names a loader renames in code, asked of the loader (``dryrun/renamed.py``): fast
tests over a stand-in stream; the real loaders run in test_plugins.py and the zoo."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixlint.introspect.dryrun.renamed import code_renamings, probe, taken, without


@dataclass
class _Recorder:
    consumed: set[str] = field(default_factory=set)


@dataclass
class _Stream:
    recorder: _Recorder
    raised: list = field(default_factory=list)
    limit: str = ""


def _loader(params: set[str], prefix: str = "model."):
    """A loader that prepends ``prefix`` to every name but the head's, and raises on a
    name it cannot place (as AutoWeightsLoader does): it stops at the first."""

    def stream(layout: dict) -> _Stream:
        out = _Stream(_Recorder())
        for name in sorted(layout):
            full = name if name.startswith("lm_head.") else prefix + name
            if full not in params:
                out.raised.append((name, ValueError(f"no parameter {full}")))
                continue
            out.recorder.consumed.add(name)
        return out

    return stream


PARAMS = {"model.embed_tokens.weight", "model.layers.0.mlp.weight", "lm_head.weight"}


def test_without_leaves_out_one_segment_never_the_last() -> None:
    assert without("model.layers.0.mlp.weight", "model") == "layers.0.mlp.weight"
    assert without("model.layers.4.mtp_block.norm.weight", "mtp_block") == (
        "model.layers.4.norm.weight"
    )
    assert without("model.weight", "weight") is None
    assert without("lm_head.weight", "model") is None


def test_probe_finds_the_names_a_loader_prefixes_in_code() -> None:
    layout = {name: ((4, 4), None) for name in PARAMS}
    stream = _loader(PARAMS)
    first = taken(stream(layout), layout)
    assert first == {"lm_head.weight"}
    out, names, said = probe(layout, first, stream)
    assert names == {
        "model.embed_tokens.weight": "embed_tokens.weight",
        "model.layers.0.mlp.weight": "layers.0.mlp.weight",
    }
    assert set(out) == {"embed_tokens.weight", "layers.0.mlp.weight", "lm_head.weight"}
    assert said == ["`model.` left out (2 names)"]
    assert taken(stream(out), out) == set(out)


def test_probe_renames_nothing_a_loader_takes_in_no_form() -> None:
    layout = {"model.layers.0.other.weight": ((4,), None), "lm_head.weight": ((4,), None)}
    stream = _loader(PARAMS)
    out, names, said = probe(layout, taken(stream(layout), layout), stream)
    assert out == layout and names == {} and said == []


def test_probe_stops_when_out_of_time() -> None:
    layout = {name: ((4, 4), None) for name in PARAMS}
    stream = _loader(PARAMS)
    out, names, _ = probe(layout, {"lm_head.weight"}, stream, out_of_time=lambda: True)
    assert out == layout and names == {}


class _MtpLoader:
    def load_weights(self, weights):
        for name, weight in weights:
            if name.startswith("mtp."):
                name = name.replace("mtp.", "model.")
            yield name.replace(".d2t", ".draft_id_to_target_id"), weight


def test_the_loaders_own_constant_renamings_are_undone() -> None:
    assert code_renamings(_MtpLoader) == [
        ("mtp.", "model."),
        (".d2t", ".draft_id_to_target_id"),
    ]
    params = {"model.fc.weight", "model.layers.0.norm.weight"}

    def stream(layout: dict) -> _Stream:
        out = _Stream(_Recorder())
        for name in layout:
            full = name.replace("mtp.", "model.") if name.startswith("mtp.") else name
            if name.startswith("mtp.") and full in params:
                out.recorder.consumed.add(name)
            else:
                out.raised.append((name, KeyError(name)))
        return out

    layout = {name: ((4,), None) for name in params}
    out, _, said = probe(layout, set(), stream, cls=_MtpLoader)
    assert set(out) == {"mtp.fc.weight", "mtp.layers.0.norm.weight"}
    assert said == ["`model.` read as `mtp.` (2 names)"]


def test_a_fused_parameter_the_checkpoint_holds_whole_is_read_whole() -> None:
    """Parts split from ``qkv_proj`` that the loader refuses, where it reads the fused
    tensor as the model names it: the three derived names become the one fused name,
    with the parameter's shape."""
    params = {"blocks.0.attn.qkv_proj.weight"}
    parts = [f"blocks.0.attn.{p}_proj.weight" for p in "qkv"]
    layout = {name: ((4, 8), None) for name in parts}
    fused = {name: ("blocks.0.attn.qkv_proj.weight", ((12, 8), None)) for name in parts}

    def stream(shaped: dict) -> _Stream:
        out = _Stream(_Recorder())
        for name in shaped:
            if name in params:
                out.recorder.consumed.add(name)
            else:
                out.raised.append((name, KeyError(name)))
        return out

    out, names, said = probe(layout, set(), stream, fused=fused)
    assert out == {"blocks.0.attn.qkv_proj.weight": ((12, 8), None)}
    assert set(names) == set(parts)
    assert said == ["fused parameters read whole (3 names)"]
