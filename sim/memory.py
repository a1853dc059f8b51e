"""Memory feasibility: does each GPU hold its weights, and how many KV blocks are left?

vLLM sizes one KV pool for all workers: each GPU's free memory (total x utilisation - weights -
activation reserve) divided by the KV bytes per token it stores, minimum over GPUs, in blocks
(vllm/executor/executor_base.py, `ExecutorBase.determine_num_available_blocks` takes the
minimum of the workers' answers). Where the draft model is co-located (SD), GPU 0 of the
verifier group also holds the draft's weights and its KV.

vLLM 0.9.2's V0 engine (`scheduler = "vllm-v0"`) does not count those draft weights:
`SpecDecodeWorker.determine_num_available_blocks` asks the scorer's `Worker` alone, whose
`memory_profiling` counts the scorer's own weights (`model_memory_usage`), the rise of the
allocator's peak during the scorer's profile run and the non-torch memory, while the draft's
weights, loaded before the profile by the proposer's model runner, are none of these; the
blocks are then split between target and draft KV by their block sizes
(`split_num_cache_blocks_evenly`). So GPU 0's pool is sized as if the draft weighed nothing and
its weights come on top of gpu_memory_utilization: the run fits only where the GPU's whole
memory holds them too (the budget's `uncounted_bytes`), and says so when little is left there.
vLLM V1 loads a draft inside the model runner's measured load and counts it.
A scenario that does not fit is a result with a reason, not a crash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psdsim.sim.catalog import Catalog
from psdsim.sim.layout import COLOCATED, DEDICATED, layout_for
from psdsim.sim.scenario import Scenario

GB = 1e9


@dataclass(frozen=True)
class GPUBudget:
    """What one GPU must hold. Bytes per token are summed over the models whose KV it stores."""

    role: str
    gpu: str
    usable_bytes: float
    weight_bytes: float
    reserve_bytes: float
    kv_bytes_per_token: float
    memory_bytes: float = math.inf   # the GPU's whole memory
    uncounted_bytes: float = 0.0     # weights it holds that the engine's KV sizing does not count

    @property
    def free_bytes(self) -> float:
        return self.usable_bytes - self.weight_bytes - self.reserve_bytes

    def held_bytes(self, kv_tokens: int) -> float:
        """What the GPU holds with a KV cache of `kv_tokens` slots: weights, counted or not,
        the reserve and the cache."""
        weights = self.weight_bytes + self.uncounted_bytes
        return weights + self.reserve_bytes + kv_tokens * self.kv_bytes_per_token

    @property
    def kv_tokens(self) -> int:
        return int(max(self.free_bytes, 0.0) // self.kv_bytes_per_token)


@dataclass(frozen=True)
class MemoryPlan:
    budgets: tuple[GPUBudget, ...]
    block_size: int
    fits: bool
    reason: str | None
    field: str | None  # the scenario field most to blame when it does not fit
    block_cap: int | None = None  # num_gpu_blocks_override

    @property
    def kv_blocks(self) -> int:
        return min(self.pools().values())

    def swap_blocks(self, swap_space_gb: float) -> int:
        """KV blocks the CPU swap space holds (`--swap-space` per GPU; the tightest GPU binds)."""
        return min(int(swap_space_gb * GB // (b.kv_bytes_per_token * self.block_size))
                   for b in self.budgets)

    def pools(self) -> dict[str, int]:
        """KV blocks per GPU group: the verifier group's tightest GPU, and the drafter GPU."""
        out: dict[str, int] = {}
        for b in self.budgets:
            group = "drafter" if b.role == "drafter GPU" else "verifier"
            blocks = b.kv_tokens // self.block_size
            if self.block_cap is not None:
                blocks = min(blocks, self.block_cap)
            out[group] = min(out.get(group, blocks), blocks)
        return out

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def warnings(self) -> list[str]:
        """Where weights the engine does not count leave a GPU less free memory than the reserve
        psdsim keeps for one model's activations: what the engine's profile leaves out there
        (the CUDA context, the co-located draft's own activations) may not fit."""
        out = []
        for b in self.budgets:
            left = b.memory_bytes - b.held_bytes(self.kv_tokens)
            if b.uncounted_bytes and left < b.reserve_bytes:
                out.append(f"{b.role} ({b.gpu}) holds {b.held_bytes(self.kv_tokens) / GB:.1f} of its "
                           f"{b.memory_bytes / GB:.1f} GB: vLLM V0 sizes the KV cache without the co-located "
                           f"draft's {b.uncounted_bytes / GB:.1f} GB of weights, and the {left / GB:.2f} GB "
                           "left must hold what its memory profile does not count (the CUDA context, the "
                           "draft's activations); the run may run out of memory")
        return out


def gpu_layout(s: Scenario, cat: Catalog) -> list[GPUBudget]:
    """The GPUs a method uses and what each holds (verifier group first, then the drafter).
    With several drafter GPUs each holds the draft model and the draft KV of every request it
    may draft, so they size the pool like one drafter."""
    layout = layout_for(s)
    tp = layout.verifier_tp
    target, draft = cat.models[s.target], cat.models[s.draft]
    memory = cat.gpus[s.gpu].memory_gb * GB
    usable = memory * s.gpu_memory_utilization
    reserve = s.activation_reserve_gb * GB
    target_w, target_kv = target.weight_bytes / tp, target.kv_bytes_per_token_per_gpu(tp)
    budgets = []
    for rank in range(tp):
        weights, kv, uncounted = target_w, target_kv, 0.0
        if layout.drafter == COLOCATED and rank == 0:  # draft on GPU 0 at TP=1
            kv += draft.kv_bytes_per_token
            if s.scheduler == "vllm-v0":   # outside the scorer's memory profile (module docstring)
                uncounted = draft.weight_bytes
            else:
                weights += draft.weight_bytes
        budgets.append(GPUBudget(f"verifier GPU {rank}", s.gpu, usable, weights, reserve, kv, memory,
                                 uncounted))
    if layout.drafter == DEDICATED:
        dgpu = s.drafter_gpu_key
        d_memory = cat.gpus[dgpu].memory_gb * GB
        budgets.append(GPUBudget("drafter GPU", dgpu, d_memory * s.gpu_memory_utilization, draft.weight_bytes,
                                 reserve, draft.kv_bytes_per_token, d_memory))
    return budgets


def plan_memory(s: Scenario, cat: Catalog) -> MemoryPlan:
    tp, heads = layout_for(s).verifier_tp, cat.models[s.target].heads
    if heads % tp:
        reason = (f"does not fit: TP={tp} does not divide the target's {heads} attention heads "
                  f"(vLLM requires it)")
        return MemoryPlan((), s.block_size, False, reason, "tensor_parallel_size")
    budgets = tuple(gpu_layout(s, cat))
    for b in budgets:
        if b.free_bytes < 0:
            blame = "draft" if b.role == "drafter GPU" else "target"
            need = (b.weight_bytes + b.reserve_bytes) / GB
            reason = (f"does not fit: {b.role} ({b.gpu}) needs {need:.1f} GB for weights and "
                      f"reserve but has {b.usable_bytes / GB:.1f} GB at gpu_memory_utilization="
                      f"{s.gpu_memory_utilization:g} (short by {-b.free_bytes / GB:.1f} GB)")
            return MemoryPlan(budgets, s.block_size, False, reason, blame)
    cap = s.num_gpu_blocks_override
    plan = MemoryPlan(budgets, s.block_size, True, None, None, cap)
    if plan.kv_tokens < s.max_model_len:
        if cap is not None and cap * s.block_size < s.max_model_len:
            reason = (f"does not fit: num_gpu_blocks_override={cap} holds {plan.kv_tokens} tokens, "
                      f"fewer than max_model_len={s.max_model_len}")
            return MemoryPlan(budgets, s.block_size, False, reason, "num_gpu_blocks_override", cap)
        tight = min(budgets, key=lambda b: b.kv_tokens)
        reason = (f"does not fit: the KV cache holds {plan.kv_tokens} tokens "
                  f"(bound by {tight.role}, {tight.gpu}), fewer than max_model_len="
                  f"{s.max_model_len}")
        return MemoryPlan(budgets, s.block_size, False, reason, "gpu_memory_utilization", cap)
    for b in budgets:
        held = b.held_bytes(plan.kv_tokens)
        if held > b.memory_bytes:
            reason = (f"does not fit: {b.role} ({b.gpu}) would hold {held / GB:.1f} GB, more than its "
                      f"{b.memory_bytes / GB:.1f} GB: vLLM V0 sizes the KV cache without the co-located "
                      f"draft's {b.uncounted_bytes / GB:.1f} GB of weights, which come on top of "
                      f"gpu_memory_utilization={s.gpu_memory_utilization:g} "
                      "(SpecDecodeWorker.determine_num_available_blocks profiles the target alone)")
            return MemoryPlan(budgets, s.block_size, False, reason, "gpu_memory_utilization", cap)
    return plan
