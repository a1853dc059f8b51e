"""What MineDraft's own worker code does when the sub-batch holding drafts has lost requests
(docs/minedraft-fidelity.md §10): calls its `ParallelSpecDecodeWorker._track_preempted_requests`
and `_prepare_previous_proposals` on CPU, on a stand-in worker state and batch, and prints what
each case returns or raises. Nothing is copied: the functions are MineDraft's, imported from a
checkout.

Opt-in, like the vLLM tools of docs/engines.md: it needs vLLM 0.9.2 and torch (the venv of
benchmarks/install_vllm_v0_host.sh) and a MineDraft checkout (the `fetch` tool's bare mirror
exported with `git archive`), named by MINEDRAFT_PATH:

    MINEDRAFT_PATH=/tmp/minedraft /work/venv-vllm092/bin/python benchmarks/minedraft_lost_drafts.py
"""

from __future__ import annotations

import os
import sys
import types
from functools import cache
from types import SimpleNamespace

VOCAB, K = 8, 3


@cache
def _worker_api():
    """MineDraft's worker class and vLLM's proposals with the plugin's patch (its log-probs),
    imported and patched once."""
    path = os.environ.get("MINEDRAFT_PATH")
    if not path:
        sys.exit("set MINEDRAFT_PATH to a MineDraft checkout (see the module docstring)")
    sys.path.insert(0, path)
    sys.modules.setdefault("torch_scatter", types.SimpleNamespace(scatter_max=None))  # TETRIS only
    from minedraft.plugin.spec_decode.interfaces import SpeculativeProposalsPatch
    from minedraft.plugin.spec_decode.spec_decode_worker import ParallelSpecDecodeWorker
    from vllm.spec_decode.interfaces import SpeculativeProposals

    SpeculativeProposalsPatch.apply_patch()
    return ParallelSpecDecodeWorker, SpeculativeProposals


def case(drafted: int, lost: int, joined: int, preempted: bool) -> str:
    """`drafted` requests drafted in the last step; `lost` of them preempted (masked by the
    worker) or aborted (not masked); `joined` swapped in at the batch's end."""
    import torch

    worker_cls, proposals_cls = _worker_api()
    proposals = proposals_cls(torch.arange(drafted * K).reshape(drafted, K), torch.rand(drafted, K, VOCAB),
                              torch.full((drafted,), K), proposal_logprobs=torch.zeros(drafted, K, VOCAB))
    state = SimpleNamespace(use_pearl=False, _previous_proposals=proposals, _vocab_size=VOCAB,
                            _valid_previous_proposals=torch.ones(drafted, dtype=torch.bool),
                            _previous_request_ids={f"r{i}": i for i in range(drafted)})
    gone = [f"r{i}" for i in range(drafted - lost, drafted)]
    if preempted:
        worker_cls._track_preempted_requests(state, SimpleNamespace(preempted_requests_ids=gone))
    rows = [f"r{i}" for i in range(drafted - lost)] + [f"s{j}" for j in range(joined)]
    batch = SimpleNamespace(seq_group_metadata_list=[SimpleNamespace(request_id=r) for r in rows],
                            num_lookahead_slots=K)
    try:
        out = worker_cls._prepare_previous_proposals(state, batch)
    except RuntimeError as e:
        return f"RuntimeError: {str(e).splitlines()[0]}"
    return f"proposals for {out.proposal_token_ids.shape[0]} of {len(rows)} requests"


def main() -> None:
    cases = [(8, 0, 0, True), (8, 1, 0, True), (8, 3, 0, True), (8, 1, 0, False), (8, 1, 2, True),
             (8, 1, 1, True), (8, 0, 2, True)]
    for drafted, lost, joined, preempted in cases:
        how = "preempted" if preempted else "aborted"
        outcome = case(drafted, lost, joined, preempted)
        print(f"{drafted} drafted, {lost} {how}, {joined} swapped in: {outcome}")


if __name__ == "__main__":
    main()
