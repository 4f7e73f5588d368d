"""What a checkpoint stream left undone, as typed facts (issue 37): the dry-run observes
them (``weights.py``, ``quantlayouts.py``, ``selflayout.py``, ``checkpoint_run.py``) and
the PFX701 unit (``checks/pfx701_weight_loading.py``) alone writes their words and
decides their severity. Each fact carries its site and the data its message needs; the
fields of ``Loading`` say where it was seen (an FP8 layout, the model's own layout, a
layout the loader refused as a whole), for the unit's policy."""

from __future__ import annotations

from dataclasses import dataclass, field

Site = tuple[str, int]


@dataclass(kw_only=True)
class Loading:
    """What every PFX701 fact may carry about the layout it was seen on."""

    # an FP8 layout's (``quantlayouts.py``): the KV-cache scale naming tried ("" for none)
    fp8_kv: str | None = None
    # a KV-cache scale real FP8 tools may not name there (``Synthesised.unprojected``)
    contested: bool = False
    # other kinds of scale that meet the same loader line (one fix mends them)
    more_scales: int = 0
    # the layout checked, when it is not the reference class's (``selflayout.py``)
    layout: str = ""
    # the layout is derived from the model's own tables (``selflayout.py``): what it
    # leaves unwritten rests on prefixlint's reading of them
    own_layout: bool = False


@dataclass
class NeverLoaded(Loading):
    """A checkpoint tensor ``load_weights`` never consumes."""

    tensor: str
    site: Site
    skips_param: bool = False  # the parameter of that name stays random: the loader skips it
    nothing_random: bool = False  # every parameter is written without it


@dataclass
class Unwritten(Loading):
    """A parameter no checkpoint tensor reaches."""

    param: str
    site: Site
    embedding_head: bool = False  # ``lm_head`` of a model served as an embedding model


@dataclass
class UnwrittenElements(Loading):
    """Elements of a parameter (not split in shards) that no write covers."""

    param: str
    site: Site
    missing: int
    total: int
    also: list[str] = field(default_factory=list)  # the module's other params, same part


@dataclass
class UnwrittenShard(Loading):
    """A shard of a stacked parameter no write covers; ``misrouted``: the other shards
    that more than one checkpoint layer wrote (a mapping entry names the wrong shard)."""

    param: str
    shard: str
    site: Site
    misrouted: list[tuple[str, list[str]]] = field(default_factory=list)
    slots: list[str] = field(default_factory=list)  # scales missing the same shard's slot
    also: list[str] = field(default_factory=list)  # the module's other params, same part


@dataclass
class LoaderRaises(Loading):
    """``load_weights`` raised on a checkpoint tensor; ``said``: the error described.
    ``refused_layout``: the loader raised on so many kinds of names that the layout may be
    another format than the one it reads (not verified)."""

    tensor: str
    said: str
    site: Site
    refused_layout: bool = False


@dataclass
class RefusedDeclared(Loading):
    """``load_weights`` refuses names its own tables say the checkpoint holds, at one
    line: ``parts`` (part, fused leaf, the tables, the mapping line naming both or None),
    the first tensor it raised on and what it said, the fused modules left in part."""

    site: Site
    parts: list[tuple[str, str, str, Site | None]]
    tensor: str
    said: str
    fused: list[str]


@dataclass
class BrokenLoader(Loading):
    """``load_weights``'s own code fails (a ``TypeError`` in the model's frame), on
    ``tensor`` ("?" before any); ``more``: more tensors raise at that line."""

    tensor: str
    said: str
    site: Site
    more: bool = False


@dataclass
class ScalesDropped(Loading):
    """The scales of an FP8 layout one loader line drops: the tensor names, the
    parameters they are for (by name), kinds and parameters with layer numbers left out."""

    names: list[str]
    kinds: list[str]
    params: list[str]
    site: Site


PFX701_FACTS: tuple[type, ...] = (
    NeverLoaded,
    Unwritten,
    UnwrittenElements,
    UnwrittenShard,
    LoaderRaises,
    RefusedDeclared,
    BrokenLoader,
    ScalesDropped,
)
