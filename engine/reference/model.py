"""A tiny decoder-only transformer with a per-request KV cache: the models the engine runs.

Llama-shaped so that its costs have the structure of a real model's: RMSNorm, rotary attention,
SwiGLU MLP, an LM head over the vocabulary. Weights are seeded random (no download); float32.

A forward pass is *varlen*, as vLLM's: the inputs of a batch are packed (request i contributes
n_i tokens starting at its position s_i), the projections and the MLP run on all packed tokens at
once, and attention runs per request over that request's cached keys and values in place (no
padding, no gather), so a pass costs weights + sum of context, not batch x longest context.
The cache has one slot per running request; the caller (the engine's driver) assigns slots and
positions, and rolls a request back by simply writing from an earlier position next time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from psdsim.engine.reference.config import ModelConfig

ROPE_BASE = 10000.0
NORM_EPS = 1e-6


@dataclass(frozen=True)
class Packed:
    """One pass's inputs: per request its cache slot, first position and tokens, packed."""

    tokens: torch.Tensor      # [N] int64, the requests' tokens one after another
    positions: torch.Tensor   # [N] int64
    slots: list[int]
    starts: list[int]         # position of each request's first input token
    lengths: list[int]        # input tokens per request

    @staticmethod
    def build(slots: list[int], starts: list[int], inputs: list[list[int]],
              device: torch.device | str = "cpu") -> Packed:
        lengths = [len(x) for x in inputs]
        flat = [t for x in inputs for t in x]
        pos = [s + j for s, n in zip(starts, lengths, strict=True) for j in range(n)]
        return Packed(torch.tensor(flat, dtype=torch.int64, device=device),
                      torch.tensor(pos, dtype=torch.int64, device=device), list(slots), list(starts),
                      lengths)

    def last_rows(self) -> torch.Tensor:
        """Row of each request's last input token in the packed order."""
        ends = torch.tensor(self.lengths, dtype=torch.int64).cumsum(0) - 1
        return ends.to(self.tokens.device)


class KVCache:
    """Keys and values of every layer for `slots` requests of up to `max_len` positions."""

    def __init__(self, layers: int, slots: int, heads: int, max_len: int, head_dim: int,
                 device: torch.device | str) -> None:
        shape = (layers, slots, heads, max_len, head_dim)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)


class _PassPlan:
    """What every layer of one pass shares: where the new keys go, and per request its query rows,
    its cached keys and values (views of all layers) and its causal mask."""

    def __init__(self, batch: Packed, cache: KVCache, heads: int) -> None:
        device = batch.tokens.device
        slot_of_token = torch.repeat_interleave(torch.tensor(batch.slots, device=device),
                                                torch.tensor(batch.lengths, device=device))
        self.index = (slot_of_token[:, None], torch.arange(heads, device=device)[None, :],
                      batch.positions[:, None])
        self.requests: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        row = 0
        for slot, start, length in zip(batch.slots, batch.starts, batch.lengths, strict=True):
            end = start + length
            mask = None if length == 1 else _causal(start, length, device)
            self.requests.append((row, row + length, cache.k[:, slot:slot + 1, :, :end],
                                  cache.v[:, slot:slot + 1, :, :end], mask))
            row += length


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, NORM_EPS)


class Block(nn.Module):
    """Pre-norm attention + SwiGLU MLP, each added to the residual stream."""

    def __init__(self, cfg: ModelConfig, g: torch.Generator) -> None:
        super().__init__()
        h, f = cfg.hidden, cfg.mlp
        self.heads, self.head_dim = cfg.heads, h // cfg.heads
        self.attn_norm, self.mlp_norm = RMSNorm(h), RMSNorm(h)
        self.wqkv = nn.Parameter(_normal((h, 3 * h), 1 / math.sqrt(h), g))
        self.wo = nn.Parameter(_normal((h, h), cfg.residual_scale / math.sqrt(h), g))
        self.w_gate_up = nn.Parameter(_normal((h, 2 * f), 1 / math.sqrt(h), g))
        self.w_down = nn.Parameter(_normal((f, h), cfg.residual_scale / math.sqrt(f), g))

    def forward(self, x: torch.Tensor, plan: _PassPlan, rope: torch.Tensor, layer: int,
                cache: KVCache) -> torch.Tensor:
        n, h = x.shape
        qkv = self.attn_norm(x) @ self.wqkv
        # Rotate queries and keys together: pairs of features as complex numbers times e^(i angle).
        qk = torch.view_as_complex(qkv[:, :2 * h].reshape(n, 2 * self.heads, self.head_dim // 2, 2))
        qk = torch.view_as_real(qk * rope).flatten(-2)
        k, v = qk[:, self.heads:], qkv[:, 2 * h:].view(n, self.heads, self.head_dim)
        cache.k[layer].index_put_(plan.index, k)
        cache.v[layer].index_put_(plan.index, v)
        q = qk[:, :self.heads].transpose(0, 1).unsqueeze(0)  # [1, heads, N, head_dim]
        outs = [F.scaled_dot_product_attention(q[:, :, a:b], ks[layer], vs[layer], attn_mask=mask)
                for a, b, ks, vs, mask in plan.requests]
        attn = torch.cat(outs, dim=2)[0].transpose(0, 1).reshape(n, h)
        x = x + attn @ self.wo
        gate, up = (self.mlp_norm(x) @ self.w_gate_up).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ self.w_down


class Decoder(nn.Module):
    """Embedding → blocks → final norm → LM head."""

    def __init__(self, cfg: ModelConfig, blocks: list[Block], embed: torch.Tensor, norm: RMSNorm,
                 head: torch.Tensor, max_len: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("head", head, persistent=False)
        self.head_dim = cfg.hidden // cfg.heads
        self.max_len = max_len
        inv = 1.0 / ROPE_BASE ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        self.register_buffer("rope", torch.polar(torch.ones_like(angles), angles), persistent=False)

    @property
    def layers(self) -> int:
        return len(self.blocks)

    def new_cache(self, slots: int) -> KVCache:
        return KVCache(self.layers, slots, self.cfg.heads, self.max_len, self.head_dim,
                       self.embed.device)

    @torch.inference_mode()
    def forward(self, batch: Packed, cache: KVCache, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [len(rows), vocab] at the packed rows asked for (all rows when None)."""
        x = self.embed[batch.tokens]
        plan = _PassPlan(batch, cache, self.cfg.heads)
        rope = self.rope[batch.positions][:, None, :]
        for i, block in enumerate(self.blocks):
            x = block(x, plan, rope, i, cache)
        if rows is not None:
            x = x[rows]
        return self.norm(x) @ self.head.T


def build_target(cfg: ModelConfig, max_len: int, device: torch.device | str = "cpu") -> Decoder:
    """The target model from the seed: every process that builds it gets the same weights."""
    embed, blocks, norm, head, _ = _weights(cfg)
    return Decoder(cfg, blocks, embed, norm, head, max_len).to(device).eval()


def build_draft(cfg: ModelConfig, max_len: int, device: torch.device | str = "cpu") -> Decoder:
    """The draft model: the target's embedding, first `draft_layers` blocks and final norm (its
    own copies, as a draft model has its own weights), and an LM head that mixes the target's
    with a seeded random head of the same scale: sqrt(1 - n^2) x target + n x random, n =
    `draft_noise`."""
    embed, blocks, norm, head, noise = _weights(cfg)
    n = cfg.draft_noise
    return Decoder(cfg, blocks[:cfg.draft_layers], embed, norm, math.sqrt(1 - n * n) * head + n * noise,
                   max_len).to(device).eval()


def _weights(cfg: ModelConfig) -> tuple[torch.Tensor, list[Block], RMSNorm, torch.Tensor, torch.Tensor]:
    """Embedding, blocks, final norm, LM head and the draft's noise head, drawn in a fixed order."""
    g = torch.Generator().manual_seed(cfg.seed)
    embed = _normal((cfg.vocab, cfg.hidden), 1.0, g)
    blocks = [Block(cfg, g) for _ in range(cfg.layers)]
    head = _normal((cfg.vocab, cfg.hidden), cfg.logit_std / math.sqrt(cfg.hidden), g)
    noise = _normal((cfg.vocab, cfg.hidden), cfg.logit_std / math.sqrt(cfg.hidden), g)
    return embed, blocks, RMSNorm(cfg.hidden), head, noise


def _normal(shape: tuple[int, int], std: float, g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g) * std


def _causal(start: int, length: int, device: torch.device) -> torch.Tensor:
    """Boolean mask [length, start + length]: query j (at start + j) sees keys up to start + j."""
    keys = torch.arange(start + length, device=device)
    return keys[None, :] <= (start + torch.arange(length, device=device))[:, None]
