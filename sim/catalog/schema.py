"""What the catalog holds: GPUs, links, models, dataset profiles, acceptance priors and engine
execution profiles as frozen dataclasses, and what the cost model derives from a model's published
shape (parameter counts, weight and KV bytes), so that a number is written once and checked
against the published counts in the tests. Reading and checking them is sim/catalog/loader.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BYTES_PER_KV_ELEMENT = 2  # KV cache in bf16/fp16, vLLM's default kv_cache_dtype="auto"
# The tables of a catalog file, each a table of entries ([gpus.KEY] and its fields)
USER_TABLES = ("gpus", "links", "models", "datasets", "acceptance", "engines")


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    memory_gb: float
    memory_bandwidth_gbps: float
    bf16_tflops: float
    nvlink: bool
    host_link: str  # links.toml key of the GPU's link to CPU memory
    source: str
    fp8_tflops: float = 0.0  # 0: no FP8 tensor cores

    def tflops(self, compute: str) -> float:
        """Dense tensor-core rate for a model computing in `compute` ("bf16" or "fp8")."""
        return self.fp8_tflops if compute == "fp8" and self.fp8_tflops else self.bf16_tflops


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    nvlink: bool
    p2p_latency_us: float
    p2p_bandwidth_gbps: float
    allreduce_latency_us: float
    allreduce_busbw_gbps: float
    source: str

    def p2p_seconds(self, nbytes: float) -> float:
        """Time of one point-to-point message of `nbytes` (latency + bytes / bandwidth)."""
        return self.p2p_latency_us * 1e-6 + nbytes / (self.p2p_bandwidth_gbps * 1e9)

    def broadcast_seconds(self, nbytes: float) -> float:
        """One rank's message to a TP group: all-reduce-like latency, then the bytes at the
        point-to-point rate (pipelined tree/ring broadcast) [EST]."""
        return self.allreduce_latency_us * 1e-6 + nbytes / (self.p2p_bandwidth_gbps * 1e9)

    def allreduce_seconds(self, nbytes: float, ranks: int) -> float:
        """Ring all-reduce of `nbytes` over `ranks` GPUs (nccl-tests bus-bandwidth convention)."""
        if ranks <= 1:
            return 0.0
        wire = nbytes * 2.0 * (ranks - 1) / ranks
        return self.allreduce_latency_us * 1e-6 + wire / (self.allreduce_busbw_gbps * 1e9)


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer (dense or MoE), or an EAGLE draft head, by its config shape."""

    key: str
    hf_id: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool
    qk_norm: bool
    bytes_per_param: float     # non-embedding weights; embeddings and LM heads stay 16-bit
    source: str
    compute: str = "bf16"      # "fp8": matmuls at the GPU's FP8 rate (W8A8)
    experts: int = 0           # MoE: routed experts per layer (0 = dense MLP)
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # MoE: one always-active shared expert of this size, sigmoid-gated
    eagle: bool = False        # EAGLE head: fc(2h -> h) + one layer; the target's embedding/head

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_params(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + (2 * self.head_dim if self.qk_norm else 0)

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer (gate, up and down projections)."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def shared_expert_params(self) -> int:
        """The shared expert of one layer (gate, up, down) and its h -> 1 gate (Qwen2-MoE)."""
        if not self.shared_intermediate:
            return 0
        return 3 * self.hidden * self.shared_intermediate + self.hidden

    @property
    def params_per_layer(self) -> int:
        if self.moe:
            mlp = self.experts * self.expert_params + self.hidden * self.experts  # + router
            mlp += self.shared_expert_params
        else:
            mlp = 3 * self.hidden * self.intermediate
        return self.attention_params + mlp + 2 * self.hidden  # + two norms

    @property
    def non_embedding_params(self) -> int:
        fc = 2 * self.hidden * self.hidden + self.hidden if self.eagle else 0
        return self.layers * self.params_per_layer + self.hidden + fc  # + final norm

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """Parameters the model itself stores (an EAGLE head borrows the target's embeddings)."""
        if self.eagle:
            return self.non_embedding_params
        copies = 1 if self.tie_embeddings else 2
        return self.non_embedding_params + copies * self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters a token passes through (MoE: the routed experts only), LM head included."""
        body = self.non_embedding_params
        if self.moe:
            idle = self.experts - self.experts_per_token
            body -= self.layers * idle * self.expert_params
        return body + self.embedding_params

    def _bytes(self, non_embedding: float) -> float:
        return non_embedding * self.bytes_per_param

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights the model stores on its GPUs."""
        embeddings = self.total_params - self.non_embedding_params
        extra_head = 0 if not self.eagle else self.embedding_params  # the target's LM head
        return self._bytes(self.non_embedding_params) + 2 * (embeddings + extra_head)

    @property
    def dense_streamed_bytes(self) -> float:
        """Weights every forward pass reads whatever the batch: the body (MoE: without its routed
        experts) and the LM head (an embedding table is only gathered row by row)."""
        body = self.non_embedding_params
        if self.moe:
            body -= self.layers * self.experts * self.expert_params
        return self._bytes(body) + 2 * self.embedding_params

    @property
    def expert_bytes_per_layer(self) -> float:
        return self._bytes(self.expert_params)

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts a layer reads for `tokens` tokens, each routed to
        `experts_per_token` of `experts` uniformly: E (1 - (1 - k/E)^tokens)
        (docs/reference/hardware_models_workloads.md §2.2)."""
        if not self.moe:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens)

    @property
    def body_flops_per_token(self) -> float:
        return 2.0 * (self.active_params - self.embedding_params)

    @property
    def lm_head_flops_per_token(self) -> float:
        return 2.0 * self.embedding_params

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query token, cached key token) pair over all layers: QK^T and AV."""
        return 4.0 * self.heads * self.head_dim * self.layers

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_KV_ELEMENT

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV heads are split across TP ranks; with fewer KV heads than ranks they are replicated."""
        heads_per_gpu = max(1.0, self.kv_heads / tp)
        return 2 * self.layers * heads_per_gpu * self.head_dim * BYTES_PER_KV_ELEMENT


@dataclass(frozen=True)
class PromptComponent:
    weight: float
    mu: float
    sigma: float


@dataclass(frozen=True)
class Dataset:
    key: str
    max_requests: int  # 0 = unlimited
    min_prompt: int
    max_prompt: int
    components: tuple[PromptComponent, ...]
    source: str


@dataclass(frozen=True)
class AcceptancePrior:
    """`alpha` is the mean of the per-request Beta rate; `per_position` (empty: i.i.d.) scales it
    by draft position, f_1 = 1 and each in (0, 1], the last one repeated past the list's end
    (sim/acceptance.py)."""

    draft: str
    target: str
    alpha: float
    source: str
    per_position: tuple[float, ...] = ()


ENGINE_KINDS = ("roofline", "execution")


@dataclass(frozen=True)
class EngineProfile:
    """How a serving engine executes a forward pass and a step (sim/execution.py): kernels per
    layer and their fixed GPU time, the CPU's launch and framework costs, how the two overlap.
    `kind = "roofline"` is the ideal engine of sim/costs.py and uses none of the other fields."""

    key: str
    name: str
    kind: str
    source: str
    cuda_graphs: bool = False
    async_scheduling: bool = False
    minedraft: bool = False           # MineDraft's critical-path extras (driver prep, rebuild, timers)
    kernels_per_layer: int = 0        # dense Llama-family layer at TP=1 (TP > 1 adds 2 all-reduces)
    qk_norm_kernels: int = 0          # more per layer with per-head q/k RMSNorm (Qwen3)
    moe_kernels: int = 0              # more per layer for an MoE block (router, top-k, expert GEMMs)
    kernels_per_pass: int = 0         # embedding, final norm, LM head, logits, sampler
    kernel_us: float = 0.0            # GPU: fixed time per kernel (small-kernel floor + gap)
    launch_us: float = 0.0            # CPU: per kernel launched eagerly (framework stack included)
    graph_launch_us: float = 0.0      # CPU: one CUDA graph replay
    collective_us: float = 0.0        # GPU: an eager all-reduce's latency over an in-graph one
    collective_launch_us: float = 0.0  # CPU: launching one collective eagerly, over a kernel
    prepare_ms: float = 0.0           # CPU: building one pass's inputs, fixed
    prepare_request_us: float = 0.0   # ... per request
    prepare_token_us: float = 0.0     # ... per token
    sampler_host_ms: float = 0.0      # CPU: the sampler per call
    sampler_host_row_us: float = 0.0  # ... per sampled row
    sampler_vocab_bytes: float = 0.0  # GPU: bytes per sampled row per vocabulary entry
    sync_us: float = 0.0              # a GPU->CPU synchronisation
    step_ms: float = 0.0              # CPU: per-step scheduling and output processing, fixed
    step_request_us: float = 0.0      # ... per running request (scheduling)
    output_request_us: float = 0.0    # ... per request emitting tokens (output processing)
    exposed_ms: float = 0.0           # async scheduling: framework time left on the critical path
    metadata_ms: float = 0.0          # MineDraft: one side of the metadata broadcast, fixed
    metadata_request_us: float = 0.0  # ... per request
    spec_worker_ms: float = 0.0       # CPU: the spec-decode worker's own bookkeeping per step, fixed
    spec_worker_request_us: float = 0.0  # ... per drafted request
    spec_worker_draft_us: float = 0.0    # ... per drafted request per draft token
    timer_syncs: int = 0              # MineDraft: Timer synchronize() calls per target pass
    extra_draft_rows: bool = False    # V0 MultiStepWorker: one more draft row per all-accepted request
    # Unfused elementwise kernels (norms, rotary, activations run as separate kernels): the vectors
    # each token reads and writes per layer, in widths of the hidden size, the query heads
    # (heads x head_dim), the KV heads and the MLP; 0 for an engine whose fused layer moves no
    # more than its GEMMs and attention do (sim/execution.py)
    elementwise_hidden: float = 0.0
    elementwise_heads: float = 0.0
    elementwise_kv_heads: float = 0.0
    elementwise_mlp: float = 0.0
    attention_efficiency: float = 0.0  # attention kernel's share of peak FLOPs; 0: inside the pass roofline


@dataclass(frozen=True)
class Range:
    """Where a catalog number may lie, by its source: `low <= value <= high`, and why."""

    low: float
    high: float
    why: str


# (table, entry key, field) -> its range; an acceptance entry's key is "DRAFT -> TARGET"
RangeKey = tuple[str, str, str]


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU]
    links: dict[str, Link]
    models: dict[str, Model]
    datasets: dict[str, Dataset]
    acceptance: dict[tuple[str, str], AcceptancePrior]
    engines: dict[str, EngineProfile]
    ranges: dict[RangeKey, Range] = field(default_factory=dict)

    def acceptance_prior(self, draft: str, target: str) -> AcceptancePrior | None:
        return self.acceptance.get((draft, target))


def vocabulary_mismatch(draft: Model, target: Model, names: tuple[str, str]) -> str | None:
    """Why vLLM would not speculate with `draft` for `target`: their vocabularies differ in size.
    vLLM 0.9.2 asserts that the proposer's and the scorer's vocab_size (each model config's
    hf_text_config.vocab_size) are equal before it builds the scorer (vllm/spec_decode/
    spec_decode_worker.py, SpecDecodeWorker._vocab_size): a draft token is a target token id, and
    rejection sampling compares the two distributions entry by entry, so a smaller draft
    vocabulary is refused as a larger one is. None when they agree; `names` are the two models'
    names as the user gave them (draft, target)."""
    if draft.vocab == target.vocab:
        return None
    return (f"draft {names[0]}'s vocab_size {draft.vocab:,} differs from target {names[1]}'s "
            f"{target.vocab:,}: vLLM's speculative decoding needs the two equal")

