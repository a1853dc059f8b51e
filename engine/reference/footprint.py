"""The memory a reference-engine run will allocate, estimated from its configuration before any
process starts, so that a run too large for the machine is refused in one line instead of dying in
an allocation (`--m 100000`, `--set model.vocab=1000000000`).

The terms follow what the code allocates, in float32 (4 bytes), both processes together:

- weights (model._weights, per model built: the target, and the draft unless AR): embedding, LM
  head and the draft's noise head (3 x vocab x hidden), every block of the target (the draft
  slices its first blocks from them: 4h^2 + 3h x mlp + 2h each), and while the draft mixes its
  head two more vocab x hidden temporaries: 5 x vocab x hidden + layers x block at the build's
  peak (the target holds 2 fewer heads; the estimate errs high);
- rotary tables (Decoder): max_len x head_dim floats for the complex table, as much for the angles;
- KV caches (model.KVCache): keys and values, max_running slots x max_len positions x hidden, per
  layer of each model;
- distributions: a score pass has max_running x (k + 2) rows (RemoteTarget's buffers), each of
  vocab floats: the shared probabilities and log-probabilities (two processes only), the logits,
  probabilities, log-probabilities and softmax's temporary in the verifier, the padded p and q and
  the residual of rejection sampling on the driver (8 copies at most);
- a prefill pass: min(max_num_batched_tokens, max_running x longest prompt) tokens of
  activations (x, qkv, rotated q and k, gate/up, SwiGLU: 8 x hidden + 4 x mlp floats each) and per
  prompt the attention's scores, mask and weights (3 x heads x prompt^2);
- Python objects: each request's token lists (a pointer and an int object, 8 + 28 bytes a token)
  and object (BYTES_PER_REQUEST), each step's record (BYTES_PER_STEP, plus a request id string
  and its pointer, 72 bytes, per request in it), over at most requests + output_len x
  ceil(requests / max_running) steps (every running request gains a token per decode step).
"""

from __future__ import annotations

from dataclasses import replace

from psdsim.engine.reference.config import EngineConfig, EngineConfigError

FLOAT = 4
BYTES_PER_TOKEN = 8 + 28          # a list slot and an int object
BYTES_PER_REQUEST = 512           # the Request object and its fields (sys.getsizeof, rounded up)
BYTES_PER_STEP = 4096             # a StepRecord: object + __dict__ 1.6 KB + ~35 field values, rounded up
BYTES_PER_STEP_REQUEST = 8 + 64   # a request id string ("Request:12345": 62 bytes) and its pointer
GB = 1e9
# What may be too large, engine fields then model fields: the candidates for the field to name.
SIZES = ("m", "k", "requests", "output_len", "prompt_len", "prompt_len_max", "max_num_batched_tokens",
         "model.vocab", "model.hidden", "model.layers", "model.mlp", "model.heads")


def estimate_bytes(cfg: EngineConfig) -> dict[str, int]:
    """The run's allocations by kind (bytes), as the module docstring derives them."""
    md = cfg.model
    v, h, f = md.vocab, md.hidden, md.mlp
    drafted = cfg.method != "ar"
    models, layers = (2, md.layers + md.draft_layers) if drafted else (1, md.layers)
    slots, prompt = cfg.max_running, cfg.longest_prompt
    block = 4 * h * h + 3 * h * f + 2 * h
    rows = slots * (cfg.k + 2)
    tokens = min(cfg.max_num_batched_tokens, slots * prompt)
    steps = cfg.requests + cfg.output_len * -(-cfg.requests // slots)
    return {
        "weights": models * (5 * v * h + md.layers * block + 2 * cfg.max_len * (h // md.heads)) * FLOAT,
        "KV caches": 2 * layers * slots * cfg.max_len * h * FLOAT,
        "distributions": rows * v * (8 if cfg.two_processes else 6) * FLOAT,
        "prefill": (tokens * (8 * h + 4 * f) + 3 * md.heads * prompt * prompt) * FLOAT,
        "requests and steps": (cfg.requests * (cfg.max_len * BYTES_PER_TOKEN + BYTES_PER_REQUEST)
                               + steps * (BYTES_PER_STEP + slots * BYTES_PER_STEP_REQUEST)),
    }


def _with(cfg: EngineConfig, name: str, value: int) -> EngineConfig:
    if name.startswith("model."):
        return replace(cfg, model=replace(cfg.model, **{name.removeprefix("model."): value}))
    return replace(cfg, **{name: value})


def _get(cfg: EngineConfig, name: str) -> int | None:
    space, _, short = name.rpartition(".")
    return getattr(cfg.model if space else cfg, short)


def _total(cfg: EngineConfig) -> int:
    return sum(estimate_bytes(cfg).values())


def check_memory(cfg: EngineConfig, have: int | None) -> None:
    """EngineConfigError when the run's estimate exceeds `have` bytes (None: unknown, refuse
    nothing), naming the size field whose default value would save the most, with about the
    largest value of it that fits (the estimate grows with every size, so a bisection finds it)."""
    need = _total(cfg)
    if have is None or need <= have:
        return
    default = EngineConfig()
    saved = {}
    for name in SIZES:
        value, base = _get(cfg, name), _get(default, name)
        if value is not None and base is not None and value > base:
            saved[name] = need - _total(_with(cfg, name, base))
    # Every size at or below its default and still too large: the machine is short, not a field;
    # fewer requests per batch (m) shrinks the caches and the distributions the most.
    name = max(saved, key=saved.__getitem__) if saved else "m"
    lo, hi = 1, int(_get(cfg, name) or 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _total(_with(cfg, name, mid)) <= have else (lo, mid - 1)
    fits = (f"about {lo} fits" if _total(_with(cfg, name, lo)) <= have
             else "lowering it alone is not enough: lower the other sizes too")
    parts = ", ".join(f"{kind} {size / GB:,.1f}" for kind, size in estimate_bytes(cfg).items() if size >= GB)
    raise EngineConfigError(f"{name} = {_get(cfg, name)}: the run would allocate about {need / GB:,.1f} GB "
                            f"({parts or 'in all'}) but {have / GB:,.1f} GB of memory are available; {fits}")
