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

MineDraft's plugin (PSD, PEARL) runs the verifier group as ranks 1..TP of a TP + 1 world whose
rank 0 is the drafter (`--tensor-parallel-size 5`). It shrinks the scorer's
`tensor_parallel_size` to TP around `initialize_cache`, which allocates the blocks
(`ParallelSpecDecodeWorker.initialize_cache`), but not around `determine_num_available_blocks`,
which counts them: there the scorer's `Worker.get_cache_block_size_bytes` divides the KV heads
by TP + 1 (vllm/config.py, `ModelConfig.get_num_kv_heads`: max(1, heads // tp)), so a verifier
GPU reports more blocks than its budget holds (8 KV heads at TP = 4: 1 head counted, 2 held,
twice the blocks) and allocates as many as the minimum over all GPUs, usually the drafter's, past
gpu_memory_utilization (the budget's `counted_kv_bytes_per_token`).
`kv_sizing = "exact"` counts what each GPU holds instead (psdsim's reference engine; the what-if
of both counts corrected). A scenario that does not fit is a result with a reason, not a crash.
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
    # KV bytes per token the engine divides by when it counts this GPU's blocks, where they differ
    # from those it allocates (0: the same)
    counted_kv_bytes_per_token: float = 0.0

    @property
    def free_bytes(self) -> float:
        return self.usable_bytes - self.weight_bytes - self.reserve_bytes

    @property
    def counted_kv_bytes(self) -> float:
        return self.counted_kv_bytes_per_token or self.kv_bytes_per_token

    @property
    def miscount(self) -> str:
        """Why the engine's KV sizing leaves this GPU holding more than its budget ('': it does not)."""
        if self.uncounted_bytes:
            weights = self.uncounted_bytes / GB
            return (f"vLLM V0 sizes the KV cache without the co-located draft's {weights:.1f} GB of weights "
                    "(SpecDecodeWorker.determine_num_available_blocks profiles the target alone)")
        if self.counted_kv_bytes_per_token:
            counted, held = self.counted_kv_bytes_per_token, self.kv_bytes_per_token
            return (f"MineDraft counts its KV blocks at {counted:,.0f} bytes a token, {held:,.0f} held "
                    "(the scorer's KV heads divided by TP + 1)")
        return ""

    def held_bytes(self, kv_tokens: int) -> float:
        """What the GPU holds with a KV cache of `kv_tokens` slots: weights, counted or not,
        the reserve and the cache."""
        weights = self.weight_bytes + self.uncounted_bytes
        return weights + self.reserve_bytes + kv_tokens * self.kv_bytes_per_token

    @property
    def kv_tokens(self) -> int:
        """The KV slots the engine counts in this GPU's free memory."""
        return int(max(self.free_bytes, 0.0) // self.counted_kv_bytes)


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
        return min(int(swap_space_gb * GB // (b.counted_kv_bytes * self.block_size))
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
        """Where the engine's KV sizing leaves a GPU less free memory than the reserve psdsim keeps
        for one model's activations: what the engine's profile leaves out there (the CUDA
        context, a co-located draft's own activations) may not fit."""
        out = []
        for b in self.budgets:
            held = b.held_bytes(self.kv_tokens)
            left = b.memory_bytes - held
            if b.miscount and left < b.reserve_bytes:
                out.append(f"{b.role} ({b.gpu}) holds {held / GB:.1f} of its {b.memory_bytes / GB:.1f} GB: "
                           f"{b.miscount}, and the {left / GB:.2f} GB left must hold what its memory profile "
                           "does not count (the CUDA context, the draft's activations); the run may run out "
                           "of memory")
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
    counted = 0.0
    if _counts_at_one_more_rank(s):   # max(1, heads // (tp + 1)) heads' worth (module docstring)
        counted = target.kv_bytes_per_token * max(1, target.kv_heads // (tp + 1)) / target.kv_heads
    budgets = []
    for rank in range(tp):
        weights, kv, uncounted = target_w, target_kv, 0.0
        if layout.drafter == COLOCATED and rank == 0:  # draft on GPU 0 at TP=1
            kv += draft.kv_bytes_per_token
            if _vllm_v0_sizing(s):   # outside the scorer's memory profile (module docstring)
                uncounted = draft.weight_bytes
            else:
                weights += draft.weight_bytes
        budgets.append(GPUBudget(f"verifier GPU {rank}", s.gpu, usable, weights, reserve, kv, memory,
                                 uncounted, counted))
    if layout.drafter == DEDICATED:
        dgpu = s.drafter_gpu_key
        d_memory = cat.gpus[dgpu].memory_gb * GB
        budgets.append(GPUBudget("drafter GPU", dgpu, d_memory * s.gpu_memory_utilization, draft.weight_bytes,
                                 reserve, draft.kv_bytes_per_token, d_memory))
    return budgets


def _vllm_v0_sizing(s: Scenario) -> bool:
    """Whether KV blocks are counted as vLLM 0.9.2's V0 workers count them (`kv_sizing = "vllm"`
    under vllm-v0); `exact` counts what each GPU holds (an engine that sizes its cache so, like
    psdsim's reference engine, or the what-if of correct counting)."""
    return s.scheduler == "vllm-v0" and s.kv_sizing == "vllm"


def _counts_at_one_more_rank(s: Scenario) -> bool:
    """Whether the verifier group's blocks are counted as MineDraft's plugin counts them, at TP + 1
    ranks: its parallel worker sizes the cache for PSD's two sub-batches and for PEARL (vLLM V0;
    the ring and V1 are beyond the plugin)."""
    return _vllm_v0_sizing(s) and (s.batch_managed or s.method == "pearl")


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
                      f"{b.memory_bytes / GB:.1f} GB: {b.miscount}, past gpu_memory_utilization="
                      f"{s.gpu_memory_utilization:g}")
            return MemoryPlan(budgets, s.block_size, False, reason, "gpu_memory_utilization", cap)
    return plan
