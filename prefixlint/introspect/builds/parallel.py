"""Stand-in tensor/pipeline/data/expert-parallel groups, without torch.distributed.

vLLM's model code asks ``vllm.distributed.parallel_state`` for its groups
(``get_tp_group()``, ``get_pp_group()``, ...). Every accessor reads a module global at
call time, so replacing the globals is enough; everything is restored afterwards. Rank
groups are laid out as ``initialize_model_parallel`` does: ExternalDP x DP x PP x PCP x TP.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

# Globals of vllm.distributed.parallel_state that hold a group (or the node count).
GROUP_GLOBALS = (
    "_WORLD",
    "_INNER_DP_WORLD",
    "_TP",
    "_ETP",
    "_ENGRAM_DP",
    "_DCP",
    "_PCP",
    "_PP",
    "_DP",
    "_EP",
    "_EPLB",
    "_NODE_COUNT",
)


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    tp_rank: int = 0
    pp_rank: int = 0

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def name(self) -> str:
        text = f"tp={self.tp}"
        if self.tp_rank:
            text += f" (rank {self.tp_rank})"
        if self.pp > 1:
            stage = "first" if self.pp_rank == 0 else "last" if self.pp_rank == self.pp - 1 else ""
            text += f" pp={self.pp} stage {self.pp_rank}" + (f" ({stage})" if stage else "")
        return text

    def to_json(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "tp_rank": self.tp_rank, "pp_rank": self.pp_rank}


class FakeProcessGroup:
    """Answers ``size()``/``rank()`` (MoE layers read ``device_group.size()``); has no
    collectives, so any communication at construction time fails loudly."""

    def __init__(self, name: str, ranks: list[int], rank: int) -> None:
        self.group_name = name
        self._size = len(ranks)
        self._rank = ranks.index(rank)

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _groups(t: torch.Tensor, size: int) -> list[list[int]]:
    return [x.tolist() for x in t.reshape(-1, size).unbind(0)]


def _coordinator_class() -> type:
    from vllm.distributed import parallel_state as ps

    class FakeGroupCoordinator(ps.GroupCoordinator):  # type: ignore[misc, valid-type]
        """A GroupCoordinator that never touches torch.distributed. Subclassing keeps
        ``isinstance`` and the ``is_first_rank``/``is_last_rank`` properties working."""

        def __init__(self, name: str, group_ranks: list[list[int]], rank: int) -> None:
            # No super().__init__(): it would create real process groups.
            self.unique_name = f"{name}:prefixlint"
            self.rank = rank
            self.local_rank = rank
            self.device_index = rank
            self.group_ranks = group_ranks
            self.ranks = next(r for r in group_ranks if rank in r)
            self.world_size = len(self.ranks)
            self.rank_in_group = self.ranks.index(rank)
            self.torch_distributed_backend = "gloo"
            self.cpu_group = FakeProcessGroup(f"{name}:cpu", self.ranks, rank)
            self.device_group = FakeProcessGroup(f"{name}:device", self.ranks, rank)
            self.device = torch.device("cpu")
            self.use_device_communicator = False
            self.device_communicator = None
            self.mq_broadcaster = None
            self.use_custom_op_call = False
            self.use_cpu_custom_send_recv = False
            self._pending_isends = deque()

        def destroy(self) -> None:
            pass

    return FakeGroupCoordinator


@contextlib.contextmanager
def fake_parallel_state(layout: Layout, moe: bool) -> Iterator[None]:
    from vllm.distributed import parallel_state as ps

    coordinator = _coordinator_class()
    ranks = torch.arange(layout.world_size).reshape(1, 1, layout.pp, 1, layout.tp)
    rank = int(ranks[0, 0, layout.pp_rank, 0, layout.tp_rank])
    layouts: dict[str, list[list[int]] | None] = {
        "_WORLD": [list(range(layout.world_size))],
        "_TP": _groups(ranks, layout.tp),
        "_DCP": _groups(ranks, 1),
        "_PCP": _groups(ranks.transpose(3, 4), 1),
        "_PP": _groups(ranks.transpose(2, 4), layout.pp),
        "_DP": _groups(ranks.transpose(1, 4), 1),
        # vLLM creates the expert-parallel group only for MoE models.
        "_EP": _groups(ranks.transpose(1, 2), layout.tp) if moe else None,
    }
    fakes: dict[str, Any] = {
        key: None if groups is None else coordinator(key[1:].lower(), groups, rank)
        for key, groups in layouts.items()
    }
    fakes["_EPLB"] = None
    fakes["_INNER_DP_WORLD"] = fakes["_WORLD"]
    fakes["_ETP"] = fakes["_TP"]
    fakes["_ENGRAM_DP"] = None
    fakes["_NODE_COUNT"] = 1
    present = [k for k in GROUP_GLOBALS if hasattr(ps, k)]  # older releases have fewer
    saved = {k: getattr(ps, k) for k in present}
    dist = torch.distributed
    saved_dist = (dist.is_initialized, dist.get_world_size, dist.get_rank)
    try:
        for key in present:
            setattr(ps, key, fakes.get(key))
        # A few models read torch.distributed directly (gpt_oss: get_world_size()).
        dist.is_initialized = lambda: True  # type: ignore[assignment]
        dist.get_world_size = lambda group=None: (  # type: ignore[assignment]
            layout.world_size if group is None else group.size()
        )
        dist.get_rank = lambda group=None: rank if group is None else group.rank()  # type: ignore[assignment]
        yield
    finally:
        for key, value in saved.items():
            setattr(ps, key, value)
        dist.is_initialized, dist.get_world_size, dist.get_rank = saved_dist
