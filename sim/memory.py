"""Memory feasibility: does each GPU hold its weights, and how many KV blocks are left?

vLLM sizes one KV pool for all workers: each GPU's free memory (total x utilisation - weights -
activation reserve) divided by the KV bytes per token it stores, minimum over GPUs, in blocks.
Where the draft model is co-located (SD), GPU 0 of the verifier group also holds the draft's
weights and its KV. A scenario that does not fit is a result with a reason, not a crash.
"""

from __future__ import annotations

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

    @property
    def free_bytes(self) -> float:
        return self.usable_bytes - self.weight_bytes - self.reserve_bytes

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


def gpu_layout(s: Scenario, cat: Catalog) -> list[GPUBudget]:
    """The GPUs a method uses and what each holds (verifier group first, then the drafter).
    With several drafter GPUs each holds the draft model and the draft KV of every request it
    may draft, so they size the pool like one drafter."""
    layout = layout_for(s)
    tp = layout.verifier_tp
    target, draft = cat.models[s.target], cat.models[s.draft]
    usable = cat.gpus[s.gpu].memory_gb * GB * s.gpu_memory_utilization
    reserve = s.activation_reserve_gb * GB
    target_w, target_kv = target.weight_bytes / tp, target.kv_bytes_per_token_per_gpu(tp)
    budgets = []
    for rank in range(tp):
        weights, kv = target_w, target_kv
        if layout.drafter == COLOCATED and rank == 0:  # draft on GPU 0 at TP=1
            weights += draft.weight_bytes
            kv += draft.kv_bytes_per_token
        budgets.append(GPUBudget(f"verifier GPU {rank}", s.gpu, usable, weights, reserve, kv))
    if layout.drafter == DEDICATED:
        dgpu = s.drafter_gpu_key
        d_usable = cat.gpus[dgpu].memory_gb * GB * s.gpu_memory_utilization
        budgets.append(GPUBudget("drafter GPU", dgpu, d_usable, draft.weight_bytes, reserve,
                                 draft.kv_bytes_per_token))
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
    return plan
