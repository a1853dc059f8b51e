"""The real vLLM 0.9.2 V0 host side of one speculative-decoding step, timed with the GPU stubbed.

What runs on the host each step of `vllm-0.9.2-v0-eager` is plain Python in vLLM, so it is timed
here by calling vLLM's own code on the CPU; only the model's outputs are synthetic (sampler
outputs of the right shapes, small-vocabulary CPU tensors, drafts accepted at random):

  schedule   `Scheduler.schedule()` with its block manager (decode steps, k lookahead slots)
  propose    the draft side's host bookkeeping: `Top1Proposer._split_by_proposal_len`, the
             MultiStepWorker's extra rows (`_expand_execute_model_request`: a copy of every
             sequence whose drafts were all accepted) and `_filter_model_output`,
             `Top1Proposer._merge_outputs`
  score      `MQAScorer.score_proposals`: one scoring sequence per sequence, its drafts appended,
             and the scores reshaped; what vLLM 0.9.2 uses under --enforce-eager with flash
             attention (`SpecDecodeWorker.create_worker`), so what `vllm-0.9.2-v0-eager` runs
  expand     `BatchExpansionTop1Scorer.score_proposals`: the k + 1 scoring rows per sequence
             (`_expand_batch`, which calls `split_batch_by_proposal_len`) and their contraction;
             vLLM's scorer with CUDA graphs or another attention backend
  split      `split_batch_by_proposal_len` alone (also inside expand)
  reject     `RejectionSampler` on CPU tensors of a 64-token vocabulary: its Python and torch
             dispatch, not the GPU kernels it launches
  outputs    `SpecDecodeWorker._create_output_sampler_list`: the accepted tokens as per-step
             sampler outputs
  process    the engine's output processing: `create_output_by_sequence_group`,
             `update_num_computed_tokens`, `MultiStepOutputProcessor.process_outputs` (token
             appends, stop checks; detokenization on in the `detok` rows)
  sampling   `SamplingMetadata.prepare` over the k + 1 scoring rows (the sampler's host side)
  pickle / unpickle   the per-step metadata broadcast: `pickle.dumps` of the
             sequence-group metadata list on the driver, `pickle.loads` on the receiving rank

The sweep covers batches of 8-256 running sequences, k = 1-5, n = 1-2 (n fans a prompt out into
n requests, as vLLM's ParallelSampleSequenceGroup does), prompt lengths drawn as the paper
presets draw them (ShareGPT, max_model_len 2048, 256 output tokens). Each figure is the median
over many steps; least squares then fit `a + b*B + c*B*k` to each part (B running sequences).

Run it in the venv benchmarks/install_vllm_v0_host.sh makes (vLLM is not a psdsim dependency):

    /work/venv-vllm092/bin/python benchmarks/vllm_v0_host.py            # print the table and fits
    /work/venv-vllm092/bin/python benchmarks/vllm_v0_host.py --record   # and write
                                                   # docs/measurements/vllm_v0_host.md
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from vllm_v0_host_fit import PARTS, RECORD, fit_lines, fits, load, table, versions, write_record

ROOT = Path(__file__).resolve().parents[1]
VLLM_VERSION = "0.9.2"
MISSING = (f"vllm_v0_host: needs vLLM {VLLM_VERSION} in this interpreter; install it with "
           "benchmarks/install_vllm_v0_host.sh, then run /work/venv-vllm092/bin/python "
           "benchmarks/vllm_v0_host.py")

BLOCK = 16
VOCAB = 64              # the synthetic tensors' vocabulary: host dispatch, not GPU work
MAX_MODEL_LEN = 2048
OUTPUT_LEN = 256
DATASET = "sharegpt"
BATCHES = (8, 16, 32, 64, 128, 256)
KS = (1, 2, 3, 4, 5)
NS = (1, 2)
DETOK_K = 3             # the detokenization rows: k = 3, n = 1
ACCEPTANCE = 0.7        # per-draft acceptance of the synthetic verification


@dataclass(frozen=True)
class Config:
    batch: int
    k: int
    n: int
    detok: bool = False

    @property
    def label(self) -> str:
        return f"B={self.batch:<3} k={self.k} n={self.n}{' detok' if self.detok else ''}"


@dataclass
class Timings:
    """Per part, the seconds of each timed step."""

    config: Config
    seconds: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PARTS})
    pickled_bytes: list[int] = field(default_factory=list)
    extra_rows: list[int] = field(default_factory=list)

    def us(self, part: str, stat: str = "median") -> float:
        """A part's median (or fastest, `stat="min"`: the figure least raised by other work on a
        shared machine) step time in microseconds."""
        pick = statistics.median if stat == "median" else min
        return pick(self.seconds[part]) * 1e6


def vllm_available() -> bool:
    try:
        import vllm
    except ImportError:
        return False
    return vllm.__version__ == VLLM_VERSION


# -- the synthetic engine --------------------------------------------------------------------


def preset_prompts(count: int, rng: np.random.Generator) -> list[int]:
    """Prompt lengths as psdsim's paper presets draw them."""
    from psdsim.sim.catalog import builtin_catalog
    from psdsim.sim.workload import sample_prompt_lengths
    dataset = builtin_catalog().datasets[DATASET]
    return sample_prompt_lengths(dataset, count, MAX_MODEL_LEN - OUTPUT_LEN, rng).tolist()


def _tokenizer():
    """A byte-level BPE tokenizer trained here on synthetic words (nothing is downloaded), so
    that detokenization runs vLLM's incremental path over a real fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    rng = np.random.default_rng(0)
    letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz"))
    text = [" ".join("".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(40))
            for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=8000, special_tokens=["<eos>"]))
    from vllm.transformers_utils.tokenizer import get_cached_tokenizer
    # as vLLM loads every tokenizer: its special-token lists cached, not rebuilt per call
    return get_cached_tokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>"))


class _TokenizerGroup:
    """What vLLM's Detokenizer asks of a tokenizer group."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def get_lora_tokenizer(self, lora_request=None):
        return self.tokenizer


class _StubScorer:
    """The target worker of a scorer: returns a sampler output of the right shape (`per_entry`
    sampled rows per sequence it is given) instead of running the model."""

    def __init__(self, per_entry: int) -> None:
        self.per_entry = per_entry

    def execute_model(self, execute_model_req):
        import torch
        from vllm.model_executor.layers.sampler import SamplerOutput
        rows = len(execute_model_req.seq_group_metadata_list) * self.per_entry
        probs = torch.full((rows, VOCAB), 1.0 / VOCAB)
        return [SamplerOutput(outputs=[], sampled_token_probs=probs, logprobs=probs.log(),
                              sampled_token_ids=torch.randint(0, VOCAB, (rows, 1)))]


class _Metrics:
    """SpecDecodeWorker's acceptance metrics collector, reduced to 'nothing to report'."""

    def maybe_collect_rejsample_metrics(self, k):
        return None


class HostStep:
    """B running decode sequences under vLLM's V0 Scheduler, stepped as a speculative-decoding
    engine steps them, each host part timed."""

    def __init__(self, config: Config, rng: np.random.Generator, tokenizer) -> None:
        import torch
        from vllm.config import CacheConfig, SchedulerConfig
        from vllm.core.scheduler import Scheduler
        from vllm.engine.output_processor.multi_step import MultiStepOutputProcessor
        from vllm.engine.output_processor.stop_checker import StopChecker
        from vllm.model_executor.layers.rejection_sampler import RejectionSampler
        from vllm.spec_decode.batch_expansion import BatchExpansionTop1Scorer
        from vllm.spec_decode.mqa_scorer import MQAScorer
        from vllm.spec_decode.spec_decode_worker import SpecDecodeWorker
        from vllm.spec_decode.top1_proposer import Top1Proposer
        from vllm.transformers_utils.detokenizer import Detokenizer
        from vllm.utils import Counter

        self.config, self.rng, self.torch = config, rng, torch
        prompts = preset_prompts(config.batch // config.n, rng)
        tokens = sum(prompts) * config.n
        scheduler_config = SchedulerConfig(
            runner_type="generate", max_num_batched_tokens=max(tokens, MAX_MODEL_LEN),
            max_num_seqs=config.batch, max_model_len=MAX_MODEL_LEN, enable_chunked_prefill=False,
            num_lookahead_slots=config.k)
        cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, swap_space=0,
                            cache_dtype="auto")
        cache.num_gpu_blocks = config.batch * (MAX_MODEL_LEN // BLOCK + 2)
        cache.num_cpu_blocks = 0
        self.scheduler = Scheduler(scheduler_config, cache, None)
        detokenizer = Detokenizer(_TokenizerGroup(tokenizer)) if config.detok else None
        self.output = MultiStepOutputProcessor(
            detokenizer, [self.scheduler], Counter(), lambda seq: tokenizer,
            StopChecker(MAX_MODEL_LEN, lambda seq: tokenizer))
        self.proposer = Top1Proposer(None, "cpu", VOCAB)
        self.scorer = MQAScorer(_StubScorer(config.k + 1), "cpu", VOCAB)
        self.expander = BatchExpansionTop1Scorer(_StubScorer(1), "cpu", VOCAB)
        self.rejection = RejectionSampler()
        self.rejection.init_tensors("cpu")
        self.worker = SpecDecodeWorker.__new__(SpecDecodeWorker)   # its host methods only
        self.worker._disable_logprobs = True
        self.worker._seq_with_bonus_token_in_last_step = set()
        self.worker._request_id_seq_id_mapping = defaultdict(set)
        self.worker._metrics = _Metrics()
        self.worker.scorer_worker = SimpleNamespace(model_config=SimpleNamespace(max_logprobs=20))
        self._add_requests(prompts)
        self._prefill()

    # -- setting up: the prompts, prefilled ----------------------------------------------------

    def _add_requests(self, prompts: list[int]) -> None:
        from vllm.inputs import token_inputs
        from vllm.sampling_params import SamplingParams
        from vllm.sequence import Sequence, SequenceGroup
        seq_ids = itertools.count()
        for i, length in enumerate(prompts):
            ids = self.rng.integers(1, 7000, length).tolist()
            for sample in range(self.config.n):
                params = SamplingParams(max_tokens=OUTPUT_LEN, ignore_eos=True,
                                        detokenize=self.config.detok)
                name = f"{i}_parallel_sample_{sample}" if self.config.n > 1 else str(i)
                seq = Sequence(next(seq_ids), token_inputs(ids), block_size=BLOCK)
                self.scheduler.add_seq_group(SequenceGroup(name, [seq], arrival_time=0.0,
                                                           sampling_params=params,
                                                           draft_size=self.config.k + 1))

    def _prefill(self) -> None:
        from vllm.sequence import CompletionSequenceGroupOutput, Logprob, SequenceOutput
        metas, out, _ = self.scheduler.schedule()
        assert out.num_prefill_groups == self.config.batch, "every prompt prefills in one step"
        for meta, scheduled in zip(metas, out.scheduled_seq_groups, strict=True):
            group = scheduled.seq_group
            group.update_num_computed_tokens(meta.token_chunk_size)
            seq = group.first_seq
            token = int(self.rng.integers(1, 7000))
            sample = SequenceOutput(seq.seq_id, token, {token: Logprob(0.0)})
            self.output.process_outputs(group, [CompletionSequenceGroupOutput([sample], None)], False)

    # -- one timed decode step ----------------------------------------------------------------

    def step(self, timings: Timings) -> None:
        from vllm.sequence import ExecuteModelRequest
        from vllm.spec_decode.util import split_batch_by_proposal_len
        t = timings.seconds
        k = self.config.k
        metas, out, _ = _timed(t["schedule"], self.scheduler.schedule)
        assert out.num_prefill_groups == 0 and len(metas) == self.config.batch
        request = ExecuteModelRequest(seq_group_metadata_list=metas, num_lookahead_slots=k,
                                      running_queue_size=out.running_queue_size)
        proposals, extra = _timed(t["propose"], self._propose, request)
        timings.extra_rows.append(extra)
        scores = _timed(t["score"], self.scorer.score_proposals, request, proposals)
        _timed(t["expand"], self.expander.score_proposals, request, proposals)
        _timed(t["split"], split_batch_by_proposal_len, metas, [k] * len(metas))
        accepted = _timed(t["reject"], self._reject, proposals, scores)
        outputs = _timed(t["outputs"], self.worker._create_output_sampler_list, metas, accepted,
                         None, None, k, (0.0, 0.0, 0.0))
        _timed(t["sampling"], self._sampling_metadata, metas)
        blob = _timed(t["pickle"], pickle.dumps, metas)
        _timed(t["unpickle"], pickle.loads, blob)
        timings.pickled_bytes.append(len(blob))
        _timed(t["process"], self._process, metas, out, outputs)

    def _propose(self, request):
        """Top1Proposer.get_spec_proposals with the draft passes replaced by synthetic outputs
        (on a GPU, MultiStepWorker runs them with the TP1 draft runner's advance_step)."""
        from vllm.spec_decode.interfaces import SpeculativeProposals
        from vllm.spec_decode.multi_step_worker import MultiStepWorker
        k = request.num_lookahead_slots
        lens, seqs, indices = self.proposer._split_by_proposal_len(request.seq_group_metadata_list, k)
        expanded, originals = MultiStepWorker._expand_execute_model_request(
            request.clone(seqs), self.worker._seq_with_bonus_token_in_last_step)
        passes = [self._draft_pass(len(expanded.seq_group_metadata_list)) for _ in range(k)]
        filtered = MultiStepWorker._filter_model_output(passes, self.torch.tensor(originals))
        tokens, probs, lens = self.proposer._merge_outputs(
            batch_size=len(request.seq_group_metadata_list), proposal_len=k,
            maybe_sampler_output=filtered, proposal_lens=lens,
            nonzero_proposal_len_indices=indices, sampler_transposed=True)
        extra = len(expanded.seq_group_metadata_list) - len(seqs)
        return SpeculativeProposals(tokens, probs, lens, no_proposals=False), extra

    def _draft_pass(self, rows: int):
        from vllm.model_executor.layers.sampler import SamplerOutput
        torch = self.torch
        probs = torch.full((rows, VOCAB), 1.0 / VOCAB)
        return SamplerOutput(outputs=[None] * rows, sampled_token_probs=probs, logprobs=probs.log(),
                             sampled_token_ids=torch.randint(0, VOCAB, (rows, 1)))

    def _reject(self, proposals, scores):
        """The rejection sampler's call, then the acceptance replaced by a synthetic draw (the
        uniform synthetic probabilities would accept every draft)."""
        torch = self.torch
        self.rejection(target_with_bonus_probs=scores.probs,
                       bonus_token_ids=scores.token_ids[:, -1:],
                       draft_probs=proposals.proposal_probs,
                       draft_token_ids=proposals.proposal_token_ids)
        batch, k = proposals.proposal_token_ids.shape
        kept = torch.from_numpy(_accepted_counts(self.rng, batch, k))
        ids = scores.token_ids.clone()
        ids[torch.arange(k + 1)[None, :] > kept[:, None]] = -1
        return ids

    def _sampling_metadata(self, metas):
        from vllm.model_executor.sampling_metadata import SamplingMetadata
        rows = len(metas)
        lens = [next(iter(m.seq_data.values())).get_len() for m in metas]
        return SamplingMetadata.prepare(metas, lens, [1] * rows, device="cpu", pin_memory=False)

    def _process(self, metas, out, outputs) -> None:
        """LLMEngine._process_model_outputs' work for a spec-decode step (no async output
        processing: V0 turns it off under speculative decoding)."""
        from vllm.engine.output_processor.util import create_output_by_sequence_group
        by_group = create_output_by_sequence_group(outputs, len(metas))
        for meta, scheduled, group_outputs in zip(metas, out.scheduled_seq_groups, by_group, strict=True):
            group = scheduled.seq_group
            group.update_num_computed_tokens(meta.token_chunk_size or 0)
            self.output.process_outputs(group, group_outputs, False)


def _accepted_counts(rng: np.random.Generator, batch: int, k: int) -> np.ndarray:
    """Drafts accepted per sequence: the first rejection of k Bernoulli(ACCEPTANCE) trials."""
    rejected = rng.random((batch, k)) >= ACCEPTANCE
    return np.where(rejected.any(axis=1), rejected.argmax(axis=1), k)


def _timed(bucket: list[float], fn: Callable, *args):
    start = time.perf_counter()
    result = fn(*args)
    bucket.append(time.perf_counter() - start)
    return result


def measure(config: Config, steps: int, warmup: int, seed: int, tokenizer) -> Timings:
    rng = np.random.default_rng(seed)
    engine = HostStep(config, rng, tokenizer)
    scratch = Timings(config)
    for _ in range(warmup):
        engine.step(scratch)
    timings = Timings(config)
    for _ in range(steps):
        engine.step(timings)
    return timings


# -- the fit ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="timed decode steps per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--quick", action="store_true", help="B = 8, 64, 256 and k = 1, 3, 5 only")
    parser.add_argument("--record", action="store_true", help=f"write {RECORD.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if not vllm_available():
        print(MISSING, file=sys.stderr)
        return 2
    import logging

    import torch
    logging.getLogger("vllm").setLevel(logging.ERROR)
    torch.set_num_threads(1)   # the engine's host loop is one Python thread
    batches, ks = ((8, 64, 256), (1, 3, 5)) if args.quick else (BATCHES, KS)
    configs = [Config(b, k, n) for n in NS for k in ks for b in batches]
    configs += [Config(b, DETOK_K, 1, detok=True) for b in batches]
    tokenizer = _tokenizer()
    before = load()
    rows = []
    for i, config in enumerate(configs):
        rows.append(measure(config, args.steps, args.warmup, seed=i, tokenizer=tokenizer))
        print(f"  {config.label}: {sum(rows[-1].us(p) for p in PARTS) / 1000:.2f} ms", file=sys.stderr)
    found = {stat: fits(rows, stat) for stat in ("min", "median")}
    print(table(rows, "median"), fit_lines(found["min"]), fit_lines(found["median"]), sep="\n\n")
    if args.record:
        write_record(rows, found, (before, load()), args.steps, versions())
        print(f"wrote {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
