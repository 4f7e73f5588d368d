"""A config variant whose values sit off the constants a model could write instead.

A model that reads a value from the wrong attribute, or writes a constant where it should
read the config (a norm's ``eps=1e-5``, a rotary base of 10000, a sliding window on the
wrong layers), computes the same as transformers whenever the config's value happens to
equal that constant, or takes no part in a short input: the synthesised config has the
class's defaults (``rms_norm_eps`` 1e-6 where the bug hard-codes it, ``rope_theta``
10000), and its window (64) is longer than the comparison's input. One variant moves all
of them at once (one comparison, 0.1-0.5 s): every ``*eps``/``*epsilon`` to ``EPS``, the
rotary base to ``THETA``, a sliding window the model places per layer to ``WINDOW``
(shorter than the input). Each
value moves only where the model's files or transformers' reference read it (a value the
model ignores has nothing left to read, as a flag it ignores), and the first divergent
module says which one the model gets wrong.
"""

from __future__ import annotations

from typing import Any

EPS = 1e-2  # off 1e-5/1e-6/1e-12, and large against the variance of tiny random weights
THETA = 1000.0  # off 1e4, 5e5, 1e6
WINDOW = 4  # shorter than the comparison's input (``compare.TOKENS``, 9)


def moved_values(
    config: Any, own: frozenset[str], reads: set[str], reference: type | None
) -> tuple[dict[str, Any], str] | None:
    """(overrides, label) of the variant, or None where no value moves."""
    from prefixlint.introspect.compare.guesses import transformers_reads

    def computed(attr: str) -> bool:
        return attr in reads or (reference is not None and transformers_reads(reference, attr))

    overrides: dict[str, Any] = {}
    labels: list[str] = []
    for attr in sorted(own):
        value = getattr(config, attr, None) if _readable(config, attr) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if attr.endswith(("eps", "epsilon")) and 0 < value < EPS and computed(attr):
            overrides[attr] = EPS
        elif attr == "sliding_window" and value > WINDOW and _per_layer(config):
            overrides[attr] = WINDOW
        elif attr == "rope_theta" and value != THETA and computed(attr):
            overrides[attr] = THETA
        else:
            continue
        labels.append(f"{attr}={overrides[attr]!r}")
    rope = _theta_moved(getattr(config, "rope_parameters", None))
    if rope is not None and "rope_parameters" in reads and "rope_theta" not in overrides:
        overrides["rope_parameters"] = rope
        labels.append(f"rope_parameters.rope_theta={THETA!r}")
    return (overrides, ", ".join(labels)) if overrides else None


def _per_layer(config: Any) -> bool:
    """Whether the model's own code places the window: vLLM's engine sets
    ``CacheConfig.sliding_window`` (which every ``Attention`` without a window of its own
    takes) only where no ``layer_types`` are given or all of them slide
    (``EngineArgs.create_engine_config``); the comparison builds with the default
    ``CacheConfig``, so only a window the model passes per layer is compared as served."""
    kinds = getattr(config, "layer_types", None)
    return isinstance(kinds, (list, tuple)) and any(k != "sliding_attention" for k in kinds)


def _readable(config: Any, attr: str) -> bool:
    try:
        getattr(config, attr)
    except Exception:  # a per-layer attribute refuses a global read (Gemma 4's head_dim)
        return False
    return True


def _theta_moved(rope: Any) -> dict[str, Any] | None:
    """``rope_parameters`` with every ``rope_theta`` in it (one level of per-layer-type
    dicts, as Gemma 3's) set to ``THETA``; None where it holds none."""
    if not isinstance(rope, dict):
        return None
    if isinstance(rope.get("rope_theta"), (int, float)) and rope["rope_theta"] != THETA:
        return {**rope, "rope_theta": THETA}
    nested = {k: _theta_moved(v) for k, v in rope.items() if isinstance(v, dict)}
    if not nested or any(v is None for v in nested.values()):
        return None
    return {**rope, **nested}
