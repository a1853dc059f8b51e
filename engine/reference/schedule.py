"""Requests and their scheduling: the offline workload and vLLM V0's FCFS, prefill-first steps.

As in vLLM 0.9 V0 without chunked prefill (MineDraft's setting; sim/scheduler.py models the same):
when requests wait and seats are free under the running cap (m, or 2m for PSD), the step is a
prefill-only step admitting whole prompts first come first served within max_num_batched_tokens;
otherwise it is a decode step over every running request. Memory is never short here (every
request has its cache slot), so nothing is preempted.

Each request's state is what the driver needs to run either model on it: its tokens, how much of
them each model's KV cache holds, the drafts awaiting verification and their draft
distributions, and (PSD) its sub-batch flag.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from psdsim.engine.reference.config import EngineConfig


@dataclass(eq=False)
class Request:
    rid: int
    prompt: list[int]
    output_len: int
    tokens: list[int] = field(default_factory=list)   # prompt + emitted tokens
    slot: int = -1
    target_len: int = 0      # tokens in the target's KV cache (a prefix of `tokens`)
    draft_len: int = 0       # positions of the draft's KV cache that continue tokens + proposals
    proposals: list[int] = field(default_factory=list)  # drafts awaiting verification
    q: torch.Tensor | None = None  # their draft distributions [len(proposals), vocab]
    flag: bool = False       # PSD: the sub-batch (Batch Manager flag)
    first_token_s: float = float("nan")
    end_s: float = float("nan")

    @property
    def tid(self) -> str:
        return f"Request:{self.rid}"

    @property
    def generated(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def done(self) -> bool:
        return self.generated >= self.output_len

    def emit(self, tokens: list[int]) -> int:
        """Append emitted tokens, dropping any beyond output_len; returns how many were kept."""
        kept = tokens[:self.output_len - self.generated]
        self.tokens.extend(kept)
        return len(kept)

    def sequence_from(self, start: int) -> list[int]:
        """tokens + proposals from position `start` on (without copying the whole sequence)."""
        n = len(self.tokens)
        return self.tokens[start:] + self.proposals if start <= n else self.proposals[start - n:]

    def drop_proposals(self) -> None:
        self.proposals = []
        self.q = None


def workload(cfg: EngineConfig) -> list[Request]:
    """`requests` prompts of random token ids (seeded), lengths uniform in the configured range."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    hi = cfg.longest_prompt
    lens = torch.randint(cfg.prompt_len, hi + 1, (cfg.requests,), generator=g).tolist()
    prompts = [torch.randint(0, cfg.model.vocab, (n,), generator=g).tolist() for n in lens]
    if cfg.same_prompt:
        prompts = [prompts[0]] * cfg.requests
    return [Request(i, list(p), cfg.output_len, tokens=list(p)) for i, p in enumerate(prompts)]


class Scheduler:
    """FCFS admission under the running cap and the batched-token budget; cache slots."""

    def __init__(self, requests: list[Request], max_running: int, token_budget: int) -> None:
        self.waiting: deque[Request] = deque(requests)
        self.running: list[Request] = []      # admission order
        self.max_running = max_running
        self.token_budget = token_budget
        self.free_slots = list(range(max_running - 1, -1, -1))  # pop() gives the lowest

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def admit(self) -> list[Request]:
        """The prompts of a prefill step (empty: the step decodes)."""
        chosen: list[Request] = []
        tokens = 0
        while self.waiting and len(self.running) + len(chosen) < self.max_running:
            r = self.waiting[0]
            if tokens + len(r.prompt) > self.token_budget:
                break
            self.waiting.popleft()
            r.slot = self.free_slots.pop()
            chosen.append(r)
            tokens += len(r.prompt)
        self.running.extend(chosen)
        return chosen

    def retire(self, now: float) -> list[Request]:
        """Remove the requests that have all their tokens; free their slots."""
        done = [r for r in self.running if r.done]
        if done:
            self.running = [r for r in self.running if not r.done]
            for r in done:
                r.end_s = now
                self.free_slots.append(r.slot)
            self.free_slots.sort(reverse=True)
        return done
