"""The engine execution model: what a step costs on a real serving engine, CPU side included.

The roofline of sim/costs.py prices the GPU's bytes and FLOPs and nothing else. A real engine
also pays, per forward pass, a fixed GPU time per kernel (a small kernel's floor and the gap
between kernels) and, on the CPU, the launch of every kernel (eager mode) or of one CUDA graph;
and per step the framework's work: preparing inputs, the sampler, its GPU->CPU sync, scheduling
and output processing. How the two sides combine depends on the engine:

    eager pass        the CPU launches kernel after kernel and runs ahead of the GPU until a sync;
                      a pass of L layers is a two-stage pipeline, so it takes
                      max(cpu, gpu) + min(cpu, gpu) / L   (the faster side's first layer is exposed)
    CUDA graph pass   one graph launch, then the GPU's kernels back to back: cpu + gpu
    sync              the CPU waits for the GPU (sync_us), then works alone: serial CPU work
    async scheduling  (vLLM V1) the next step's framework work hides behind this step's GPU work;
                      only `exposed_ms` of it stays on the critical path

Per pass, with n = layers x (kernels per layer + 2 all-reduces when TP > 1) + kernels per pass:
    gpu = roofline(bytes, FLOPs, all-reduces) + n x kernel_us (+ 2L x collective_us, eager)
          + logits gather to the first TP rank + the sampler's full-vocabulary passes
          + tokens x the unfused elementwise kernels' bytes / bandwidth
    An unfused implementation runs its norms, rotary and activations as kernels of their own,
    one after another between the GEMMs: their bytes never hide under a compute-bound GEMM, so
    they add to the roofline instead of joining its max. Where the engine's attention kernel has
    its own efficiency (`attention_efficiency`), attention is priced the same way, as its own
    kernel: max(KV reads, its FLOPs at that share of peak) beside the GEMMs' roofline.
    cpu = n x launch_us (+ 2L x collective_launch_us) + the sampler's host work     (eager)
        = graph_launch_us + the sampler's host work                                 (graphs)

MineDraft (engine profile `minedraft = true`) adds work on the critical path, each a named step
column (sim/records.py): the driver prepares the target's inputs and broadcasts the sequence
metadata before it drafts (`prep_s`, a part of draft_s); the first verifier rank rebuilds the model
input from that metadata (`verify_prep_s`, parallel layouts only: the driver is not in the verifier
group); every Timer region synchronises the GPU (`timer_s`); the full-vocabulary logits are
gathered to the first rank and sampled before the return (`sample_s`); vLLM's MultiStepWorker
drafts one extra row for each request whose drafts were all accepted (`extra_rows`: the methods
add those rows to the batch they draft, `extra_draft_rows`). The per-step framework work is
`framework_s`; vLLM V0's spec-decode worker adds its own host bookkeeping around the proposals
and their scoring, serial on the driver and charged with the drafting (`spec_worker`).

The constants are the engine profile's (sim/catalog/engines.toml, each with its source); the
`roofline` profile is sim/costs.AnalyticCost itself, unchanged.
"""

from __future__ import annotations

from psdsim.sim.catalog import GPU, Catalog, EngineProfile, Link, Model
from psdsim.sim.costs import (
    NO_CHUNKS,
    AnalyticCost,
    Chunks,
    ForwardModel,
    OptionalCosts,
    StepCost,
    VerifyParts,
)
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.scenario import Scenario

LOGIT_BYTES = 2  # bf16 logits gathered to the first TP rank before sampling
ACTIVATION_BYTES = 2  # bf16 activations, as the elementwise kernels read and write them
DRIVER_PREP = "driver prep"  # its timeline slice (the driver's track)


class PassModel:
    """One model on one TP group under one engine: the CPU and GPU seconds of a forward pass.

    Everything that does not depend on the pass's tokens is computed here once (kernel counts,
    floors, launches, the sampler's per-row costs), so a pass adds a few arithmetic operations to
    the roofline's; `wall` prices a whole pass in one call (this runs every simulated step)."""

    __slots__ = ("_attention_rate", "_elementwise", "_fabric", "_gather_bytes", "_roof", "_samp_host",
                 "_samp_row", "_sample_bw", "_tp", "cpu_pass", "eager", "gpu_pass", "layers")

    def __init__(self, model: Model, gpu: GPU, tp: int, fabric: Link, engine: EngineProfile,
                 mem_efficiency: float, compute_efficiency: float) -> None:
        self._roof = ForwardModel(model, gpu, tp, fabric, mem_efficiency, compute_efficiency, 0.0)
        self.layers = model.layers
        self.eager = not engine.cuda_graphs
        collectives = 2 * model.layers if tp > 1 else 0
        per_layer = (engine.kernels_per_layer + (engine.qk_norm_kernels if model.qk_norm else 0)
                     + (engine.moe_kernels if model.moe else 0))
        kernels = model.layers * per_layer + collectives + engine.kernels_per_pass
        self.gpu_pass = kernels * engine.kernel_us * 1e-6
        if self.eager:
            self.gpu_pass += collectives * engine.collective_us * 1e-6
            self.cpu_pass = (kernels * engine.launch_us + collectives * engine.collective_launch_us) * 1e-6
        else:
            self.cpu_pass = engine.graph_launch_us * 1e-6
        # the full-vocabulary logits of each sampled row gathered to the first rank: (tp-1)/tp
        # of them cross the TP fabric (an integer, so rows x it is exact)
        self._tp, self._fabric = tp, fabric
        self._gather_bytes = model.vocab * LOGIT_BYTES * (tp - 1)
        self._sample_bw = engine.sampler_vocab_bytes * model.vocab / (
            gpu.memory_bandwidth_gbps * 1e9 * mem_efficiency)
        self._samp_host = engine.sampler_host_ms * 1e-3
        self._samp_row = engine.sampler_host_row_us * 1e-6
        bandwidth = gpu.memory_bandwidth_gbps * 1e9 * mem_efficiency
        self._elementwise = elementwise_bytes_per_token(model, engine, tp) / bandwidth   # s per token
        self._attention_rate = gpu.tflops(model.compute) * 1e12 * engine.attention_efficiency

    def gpu(self, tokens: float, rows: float, ctx: float, pairs: float) -> float:
        """GPU seconds of a pass of `tokens` tokens sampling `rows` positions."""
        return self._gpu(tokens, rows, ctx, pairs, self.sample_gpu(rows))

    def _gpu(self, tokens: float, rows: float, ctx: float, pairs: float, sample: float) -> float:
        """`gpu` with its `sample_gpu(rows)` part already priced."""
        if self._attention_rate:
            roof = self._roof.seconds(tokens, rows, 0.0, 0.0) + self._roof.attention_seconds(
                ctx, pairs, self._attention_rate)
        else:
            roof = self._roof.seconds(tokens, rows, ctx, pairs)
        return roof + tokens * self._elementwise + self.gpu_pass + sample

    def sample_gpu(self, rows: float) -> float:
        """GPU seconds of gathering `rows` full-vocabulary logit rows to the first rank and
        sampling them (a part of `gpu`)."""
        t = rows * self._sample_bw
        if self._tp > 1 and rows:
            t += self._fabric.p2p_seconds(rows * self._gather_bytes / self._tp)
        return t

    def cpu(self, rows: float) -> float:
        """CPU seconds of a pass: its launches and the sampler's host work."""
        return self.cpu_pass + (self._samp_host + rows * self._samp_row if rows else 0.0)

    def combine(self, cpu: float, gpu: float) -> float:
        """Wall time of CPU and GPU work that ends in a sync (see the module docstring)."""
        if self.eager:
            return max(cpu, gpu) + min(cpu, gpu) / self.layers
        return cpu + gpu

    def wall(self, tokens: float, rows: float, ctx: float, pairs: float,
             host_rows: float) -> tuple[float, float]:
        """The wall time of one pass, `combine(cpu(host_rows), gpu(...))`, and its `sample_gpu` part."""
        sample = self.sample_gpu(rows)
        return self.combine(self.cpu(host_rows), self._gpu(tokens, rows, ctx, pairs, sample)), sample

    def draft_gpu(self, batch: int, k: int, ctx: int) -> float:
        """GPU seconds of k chained draft passes of `batch` rows (pass j over ctx + j*batch)."""
        if self._attention_rate:   # pass j attends over ctx + j*batch cached tokens, as draft_passes
            roof = sum(self._roof.seconds(batch, batch, 0.0, 0.0) + self._roof.attention_seconds(
                ctx + j * batch, ctx + j * batch, self._attention_rate) for j in range(k))
        else:
            roof = self._roof.draft_passes(batch, k, ctx)
        fixed = self.gpu_pass + self.sample_gpu(batch) + batch * self._elementwise
        return roof + k * fixed

    def draft_wall(self, batch: int, k: int, ctx: int) -> float:
        """The wall time of k chained draft passes of `batch` rows."""
        return self.combine(k * self.cpu(batch), self.draft_gpu(batch, k, ctx))


def elementwise_bytes_per_token(model: Model, engine: EngineProfile, tp: int) -> float:
    """Bytes one token's unfused elementwise kernels read and write over all layers on one rank of a
    TP group: hidden-wide vectors (norms, residual adds) on every rank, head- and MLP-wide ones
    split over the group."""
    mlp = (model.experts_per_token * model.moe_intermediate + model.shared_intermediate if model.moe
           else model.intermediate)
    split = (engine.elementwise_heads * model.heads * model.head_dim
             + engine.elementwise_kv_heads * model.kv_heads * model.head_dim + engine.elementwise_mlp * mlp)
    return model.layers * ACTIVATION_BYTES * (engine.elementwise_hidden * model.hidden + split / tp)


class EngineCost(OptionalCosts):
    """A StepCost from an engine execution profile (the non-roofline engines).

    The hot calls (draft, verify, verify_parts, framework, driver_prep) run every simulated step:
    their constants are unpacked here once. `verify_parts` prices its terms afresh rather than
    keep those of the last `verify`, so that neither depends on when the other was called."""

    def __init__(self, s: Scenario, cat: Catalog, engine: EngineProfile) -> None:
        self.engine = engine
        self.base = AnalyticCost(s, cat)   # links, rejection sampling and swaps as today
        layout = layout_for(s)
        gpu = cat.gpus[s.gpu]
        driver_gpu = cat.gpus[s.drafter_gpu_key] if layout.drafter == DEDICATED else gpu
        effs = (s.mem_efficiency, s.compute_efficiency)
        self.target = PassModel(cat.models[s.target], gpu, layout.verifier_tp, cat.links[s.tp_link_key],
                                engine, *effs)
        self.drafter = PassModel(cat.models[s.draft], driver_gpu, 1, cat.links[s.link], engine, *effs)
        self.parallel = layout.drafter == DEDICATED and engine.minedraft
        self.extra_draft_rows = engine.extra_draft_rows
        e = engine
        self._prep = (e.prepare_ms * 1e-3, e.prepare_request_us * 1e-6, e.prepare_token_us * 1e-6)
        self._meta = (e.metadata_ms * 1e-3, e.metadata_request_us * 1e-6)
        self._spec = (e.spec_worker_ms * 1e-3, e.spec_worker_request_us * 1e-6, e.spec_worker_draft_us * 1e-6)
        self._sync = e.sync_us * 1e-6
        self._timer = e.timer_syncs * self._sync if e.minedraft else 0.0
        self._step = (e.step_ms * 1e-3, e.step_request_us * 1e-6, e.output_request_us * 1e-6)
        self._exposed = e.exposed_ms * 1e-3
        self._async = e.async_scheduling
        # links, rejection sampling and swaps are the roofline's (plus a sync for rejection)
        self.comm = self.base.comm
        self.broadcast = self.base.broadcast
        self.swap = self.base.swap
        self.overhead = self.framework(0, 0)

    # -- named terms -------------------------------------------------------------------------

    def prepare(self, requests: int, tokens: int) -> float:
        """Building one pass's inputs on the CPU (V0 prepare_model_input)."""
        fixed, per_request, per_token = self._prep
        return fixed + requests * per_request + tokens * per_token

    def metadata(self, requests: int) -> float:
        """One side of MineDraft's metadata broadcast (pickled sequence metadata through the CPU
        group's shared memory), paid by the driver sending and the verifier receiving."""
        return self._meta[0] + requests * self._meta[1]

    def framework(self, running: int, emitting: int) -> float:
        """Per-step scheduling over `running` requests and output processing of `emitting`
        (serial in V0; with async scheduling only `exposed_ms` stays on the critical path)."""
        if self._async:
            return self._exposed
        fixed, per_running, per_output = self._step
        return fixed + running * per_running + emitting * per_output

    def driver_prep(self, requests: int, tokens: int) -> float:
        """MineDraft's driver work before it drafts: the target inputs and their broadcast."""
        if not self.parallel:
            return 0.0
        fixed, per_request, per_token = self._prep
        return (fixed + requests * per_request + tokens * per_token) + (
            self._meta[0] + requests * self._meta[1])

    def spec_worker(self, batch: int, k: int) -> float:
        """The spec-decode worker's own host bookkeeping around one step's drafting and scoring
        (vLLM V0: the proposer's split, extra rows and merge, the MQA scorer's inputs and
        reshapes), serial on the driver that runs the worker; the sampler, rejection and output
        lists are priced by their own terms."""
        fixed, per_request, per_draft = self._spec
        return fixed + batch * per_request + batch * k * per_draft

    def timer(self) -> float:
        return self._timer

    # -- StepCost ----------------------------------------------------------------------------

    def draft(self, batch: int, k: int, ctx: int) -> float:
        """k chained passes over `batch` rows (the methods add V0's extra rows to the batch), with
        the spec-decode worker's bookkeeping of the step."""
        if not k or not batch:
            return 0.0
        fixed, per_request, per_token = self._prep
        return (fixed + batch * per_request + batch * per_token) + self.drafter.draft_wall(batch, k, ctx) \
            + self._sync + self.spec_worker(batch, k)

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        pairs = tokens * ctx / batch if batch else 0.0
        rows = tokens + chunks.completing
        wall, _ = self.target.wall(tokens + chunks.tokens, rows, ctx + chunks.ctx, pairs + chunks.pairs, rows)
        return self.verify_prep(batch, tokens, chunks) + wall + self._sync + self._timer

    def verify_prep(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS) -> float:
        """The verifier side's serial input preparation before its pass: the scorer's inputs,
        and where the driver is not in the group, rank 1 rebuilding them from the metadata."""
        fixed, per_request, per_token = self._prep
        host = (fixed + (batch + (1 if chunks.tokens else 0)) * per_request
                + (tokens + chunks.tokens) * per_token)
        if self.parallel:
            host += self._meta[0] + batch * self._meta[1]
        return host

    def verify_parts(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS) -> VerifyParts:
        """The named terms inside the time `verify` gives the same pass (seconds), for the step
        table."""
        return VerifyParts(self.verify_prep(batch, tokens, chunks), self._timer,
                           self.target.sample_gpu(tokens + chunks.completing))

    def draft_chunks(self, chunks: Chunks) -> float:
        if not chunks.tokens:
            return 0.0
        # a chunk pass's host side is its launches only, cpu(0), as priced since the model landed
        wall, _ = self.drafter.wall(chunks.tokens, chunks.completing, chunks.ctx, chunks.pairs, 0)
        return self.prepare(chunks.completing, chunks.tokens) + wall + self._sync

    def reject(self, positions: int) -> float:
        return self.base.reject(positions) + self._sync


def step_cost(s: Scenario, cat: Catalog) -> StepCost:
    """The StepCost of the scenario's engine: the roofline, or the execution model."""
    engine = cat.engines[s.engine_key]
    if engine.kind == "roofline":
        return AnalyticCost(s, cat)
    return EngineCost(s, cat, engine)
