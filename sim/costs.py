"""Step costs: how long drafting, target passes, transfers, swaps and overheads take.

One interface (`StepCost`) with two sources here: the analytic roofline of docs/design.md §3, built from
the catalog, and constant times for the idealised mode. Per forward pass of a model on a TP group:

    t = max(bytes / (mem_efficiency x bandwidth), flops / (compute_efficiency x peak))
        + 2 all-reduces per layer over the TP fabric        (when TP > 1)
        + layers x launch_overhead                          (eager mode, no CUDA graphs)

bytes = streamed weights / TP + context tokens x KV bytes per token / TP;
flops = tokens x body FLOPs + sampled positions x LM-head FLOPs + attention pairs x FLOPs/pair.
An MoE model's streamed weights grow with the tokens of the pass: each layer reads the experts
its tokens are routed to, E (1 - (1 - k/E)^tokens) of them
(docs/reference/hardware_models_workloads.md §2.2). Matmuls run at the GPU's FP8 rate for FP8
models where the GPU has FP8 tensor cores, at the BF16 rate otherwise (weight-only quantisation:
AWQ-INT4, or FP8 on an A100).

A target pass may carry decode verification and prefill chunks together (chunked prefill): they
share one weight read. The efficiency defaults (0.81 memory, 0.77 compute) are what
SpecDecode-Bench's fitted vLLM step model implies for Llama-3.1-8B on H100
(docs/reference/hardware_models_workloads.md §4.4); the launch overhead (50 us per layer) is the low
end of the reference's 40-100 us eager-mode estimate; the step overhead (1.2 ms) is SpecDecode-Bench's fitted
per-step cost. All are estimates: results are approximate until calibrated against traces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from psdsim.sim.catalog import GPU, Catalog, Link, Model
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.memory import plan_memory
from psdsim.sim.messages import PROB_BYTES
from psdsim.sim.scenario import Scenario


@dataclass(frozen=True)
class Chunks:
    """Prefill work in a pass: prompt tokens computed, attention pairs among them and with the
    prompts' earlier chunks, earlier-chunk tokens read from KV, prompts whose last chunk this is
    (each samples its first token), and prompts with a chunk in the pass."""

    tokens: int = 0
    pairs: float = 0.0
    ctx: int = 0
    completing: int = 0
    prompts: int = 0


NO_CHUNKS = Chunks()


class VerifyParts(NamedTuple):
    """Named terms inside a target pass's time (seconds), recorded in the step table."""

    prep: float     # the verifier's input preparation (MineDraft: rank 1's rebuild), serial
    timer: float    # Timer synchronize() calls
    sample: float   # logits gathered to the first rank and sampled, on the GPU


NO_PARTS = VerifyParts(0.0, 0.0, 0.0)


class StepCost(Protocol):
    """Seconds for each kind of work in a step. `ctx` is the batch's total cached tokens.

    The first eight members every cost model prices. The rest are capabilities only some have
    (an engine execution model's named terms, a fitted profile's slowdowns); a cost model that
    does not price one takes `OptionalCosts`'s default, which is what a step pays without it."""

    overhead: float

    def draft(self, batch: int, k: int, ctx: int) -> float:
        """k sequential draft passes over `batch` requests."""
        ...

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        """One target pass scoring `tokens` positions for `batch` decoding requests (sum of
        proposal lengths + 1 each; 0 for a prefill-only step), plus prefill `chunks`."""
        ...

    def draft_chunks(self, chunks: Chunks) -> float:
        """The draft model's pass over prompt tokens, to fill its own KV (prefill)."""
        ...

    def comm(self, nbytes: int) -> float:
        """One point-to-point message from the verifier group back to the drafter."""
        ...

    def broadcast(self, nbytes: int) -> float:
        """The drafter's inputs broadcast to the verifier group."""
        ...

    def reject(self, positions: int) -> float:
        """Rejection sampling over `positions` scored positions on the driver GPU."""
        ...

    def swap(self, blocks: int) -> float:
        """Moving `blocks` KV blocks between GPU and CPU memory (each GPU its share, in parallel)."""
        ...

    # -- optional capabilities (defaults: OptionalCosts) -----------------------------------

    contention: tuple[float, float]
    """(draft, verify) slowdown factors while drafting and a target pass run together."""

    extra_draft_rows: bool
    """Whether drafting adds a row per request whose drafts were all accepted (vLLM V0)."""

    after_idle: Callable[[str, float], float] | None
    """How much slower a side's work ("draft", "verify") runs after it idled that long; None:
    never slower."""

    def framework(self, running: int, emitting: int) -> float:
        """Per-step framework work on the critical path, for the running set and the requests
        emitting tokens."""
        ...

    def driver_prep(self, requests: int, tokens: int) -> float:
        """The driver's input preparation before it hands a target pass over."""
        ...

    def verify_parts(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS) -> VerifyParts:
        """The named terms inside the target pass `verify` priced with the same arguments."""
        ...


class OptionalCosts:
    """The optional StepCost capabilities as a cost model without them prices them: no
    slowdowns, no extra draft rows, the fixed `overhead` as the framework's work, no driver
    prep and no named parts. Every cost model here derives from it and overrides what it has."""

    overhead: float
    contention: tuple[float, float] = (1.0, 1.0)
    extra_draft_rows: bool = False
    after_idle: Callable[[str, float], float] | None = None

    def framework(self, running: int, emitting: int) -> float:
        return self.overhead

    def driver_prep(self, requests: int, tokens: int) -> float:
        return 0.0

    def verify_parts(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS) -> VerifyParts:
        return NO_PARTS


OPTIONAL = ("contention", "extra_draft_rows", "after_idle", "framework", "driver_prep", "verify_parts")


class _WithDefaults(OptionalCosts):
    """A cost model from outside the package (a test's or a tool's wrapper) that need not derive
    from OptionalCosts: its own optional capabilities where it has them, the defaults elsewhere,
    everything else read from it on every use (an `overhead` it computes stays live)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        for name in OPTIONAL:
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def complete(cost: Any) -> StepCost:
    """`cost` with every optional capability answered: itself when it derives from
    OptionalCosts (every cost model here), else a view that adds the defaults it lacks."""
    return cost if isinstance(cost, OptionalCosts) else _WithDefaults(cost)


class ForwardModel:
    """Roofline time of one forward pass of one model on a TP group of identical GPUs.

    The per-GPU constants are computed once here: `seconds` runs once or more per simulated step.
    """

    __slots__ = ("_ar_fixed", "_ar_per_token", "_attn", "_body", "_bw", "_experts", "_flops",
                 "_head", "_kv", "_launch", "_model", "_weights", "tp")

    def __init__(self, model: Model, gpu: GPU, tp: int, fabric: Link, mem_efficiency: float,
                 compute_efficiency: float, launch_s_per_layer: float) -> None:
        self.tp = tp
        # 2 all-reduces per layer of tokens x hidden bf16 activations: fixed + per-token seconds.
        ar_bytes_per_token = model.hidden * 2
        self._ar_fixed = 2 * model.layers * fabric.allreduce_seconds(0.0, tp)
        self._ar_per_token = 2 * model.layers * (
            fabric.allreduce_seconds(ar_bytes_per_token, tp) - fabric.allreduce_seconds(0.0, tp))
        self._weights = model.dense_streamed_bytes / tp
        self._model = model if model.moe else None
        self._experts = model.layers * model.expert_bytes_per_layer / tp  # per expert touched
        self._kv = model.kv_bytes_per_token_per_gpu(tp)
        self._body = model.body_flops_per_token / tp
        self._head = model.lm_head_flops_per_token / tp
        self._attn = model.attention_flops_per_pair / tp
        self._bw = gpu.memory_bandwidth_gbps * 1e9 * mem_efficiency
        self._flops = gpu.tflops(model.compute) * 1e12 * compute_efficiency
        self._launch = model.layers * launch_s_per_layer

    def _moe_weights(self, tokens: float) -> float:
        """Weight bytes one pass of `tokens` tokens of an MoE model reads per GPU (a dense
        model's are `_weights`, whatever the tokens)."""
        return self._weights + self._model.experts_touched(tokens) * self._experts

    def seconds(self, tokens: float, sampled: float, ctx_tokens: float, pairs: float) -> float:
        weights = self._weights if self._model is None else self._moe_weights(tokens)
        mem = (weights + ctx_tokens * self._kv) / self._bw
        compute = (tokens * self._body + sampled * self._head + pairs * self._attn) / self._flops
        # `max` spelt out (the same choice: the first unless the second is larger), a call less
        return ((compute if compute > mem else mem) + self._launch + self._ar_fixed
                + tokens * self._ar_per_token)

    def attention_seconds(self, ctx_tokens: float, pairs: float, flops_per_s: float) -> float:
        """The attention kernel alone: its KV reads or its FLOPs at `flops_per_s`, whichever is
        longer (sim/execution.py prices it apart from the GEMMs' roofline where an engine's
        attention kernel has its own efficiency)."""
        mem, compute = ctx_tokens * self._kv / self._bw, pairs * self._attn / flops_per_s
        return compute if compute > mem else mem

    def draft_passes(self, batch: int, k: int, ctx: int) -> float:
        """k autoregressive passes of `batch` tokens; pass j reads and attends over ctx + j*batch
        cached tokens. Same terms as `seconds`, unrolled: this runs every simulated step."""
        weights = self._weights if self._model is None else self._moe_weights(batch)
        kv, bw = self._kv, self._bw
        tokens_flops = batch * (self._body + self._head)
        attn, flops = self._attn, self._flops
        total = 0.0
        for j in range(k):
            cached = ctx + j * batch
            mem, compute = (weights + cached * kv) / bw, (tokens_flops + cached * attn) / flops
            total += compute if compute > mem else mem   # max(mem, compute), as in `seconds`
        return total + k * (self._launch + self._ar_fixed + batch * self._ar_per_token)


class AnalyticCost(OptionalCosts):
    """The default StepCost: rooflines from the catalog, placed where the method runs each model."""

    def __init__(self, s: Scenario, cat: Catalog) -> None:
        effs = (s.mem_efficiency, s.compute_efficiency, s.launch_overhead_us * 1e-6)
        gpu = cat.gpus[s.gpu]
        # Where the draft model and the driver (rejection sampling) run: a dedicated GPU in PSD,
        # PEARL and GPU-fair SD, GPU 0 of the verifier group otherwise.
        layout = layout_for(s)
        driver_gpu = cat.gpus[s.drafter_gpu_key] if layout.drafter == DEDICATED else gpu
        self.target = ForwardModel(cat.models[s.target], gpu, layout.verifier_tp,
                                   cat.links[s.tp_link_key], *effs)
        self.drafter = ForwardModel(cat.models[s.draft], driver_gpu, 1, cat.links[s.link], *effs)
        self.draft = self.drafter.draft_passes   # k passes over the batch, bound: a call less a step
        self.link = cat.links[s.link]
        # a message's time is the link's own formula: bound here, one call less per message
        self.comm = self.link.p2p_seconds
        self.broadcast = self.link.broadcast_seconds
        self._driver_bw = driver_gpu.memory_bandwidth_gbps * 1e9 * s.mem_efficiency
        self._vocab = cat.models[s.target].vocab
        self._reject_fixed = s.reject_overhead_ms * 1e-3
        self.overhead = s.step_overhead_ms * 1e-3
        # Each GPU swaps its share of a block over its own host link: (bytes per block, link).
        self._swap = [(b.kv_bytes_per_token * s.block_size, cat.links[cat.gpus[b.gpu].host_link])
                      for b in plan_memory(s, cat).budgets]

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        # MQA scoring reads each request's KV once; every scored token attends to ~its context.
        pairs = tokens * ctx / batch if batch else 0.0
        return self.target.seconds(tokens + chunks.tokens, tokens + chunks.completing,
                                   ctx + chunks.ctx, pairs + chunks.pairs)

    def draft_chunks(self, chunks: Chunks) -> float:
        if not chunks.tokens:
            return 0.0
        return self.drafter.seconds(chunks.tokens, chunks.completing, chunks.ctx, chunks.pairs)

    def reject(self, positions: int) -> float:
        # Reads target and draft probabilities and writes the recovered distribution [EST].
        return self._reject_fixed + 3 * positions * self._vocab * PROB_BYTES / self._driver_bw

    def swap(self, blocks: int) -> float:
        if not blocks:
            return 0.0
        return max(link.p2p_seconds(blocks * per_block) for per_block, link in self._swap)


class ConstantCost(OptionalCosts):
    """Fixed times whatever the batch: the idealised mode used to check the simulator against
    closed-form theory and hand-worked schedules. Drafting one sub-batch takes
    `draft_s + k * draft_per_token_s`; a target pass takes `verify_s` when it verifies and
    `prefill_s` more when it carries prefill tokens; `comm_s` is charged per message (inputs out,
    sampler output back); swapping takes `swap_s` per block."""

    def __init__(self, draft_s: float, verify_s: float, *, draft_per_token_s: float = 0.0,
                 prefill_s: float = 0.0, comm_s: float = 0.0, reject_s: float = 0.0,
                 overhead_s: float = 0.0, swap_s: float = 0.0) -> None:
        self.draft_s, self.draft_per_token_s = draft_s, draft_per_token_s
        self.verify_s, self.prefill_s = verify_s, prefill_s
        self.comm_s, self.reject_s, self.overhead, self.swap_s = comm_s, reject_s, overhead_s, swap_s

    def draft(self, batch: int, k: int, ctx: int) -> float:
        return self.draft_s + k * self.draft_per_token_s

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        return (self.verify_s if batch else 0.0) + (self.prefill_s if chunks.tokens else 0.0)

    def draft_chunks(self, chunks: Chunks) -> float:
        return 0.0

    def comm(self, nbytes: int) -> float:
        return self.comm_s

    def broadcast(self, nbytes: int) -> float:
        return self.comm_s

    def reject(self, positions: int) -> float:
        return self.reject_s

    def swap(self, blocks: int) -> float:
        return self.swap_s * blocks
