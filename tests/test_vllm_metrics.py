"""Hostile acceptance inputs to `psdsim calibrate`: vLLM logs and metrics that would hang it, crash
it, or make it write a prior or a run command psdsim refuses. Each is refused in one line naming
the input and the bound, or (where the input is legitimately at a bound) written with a note."""

from __future__ import annotations

import pytest

from psdsim.cli import main
from psdsim.sim.acceptance import accepted_per_draft, alpha_for_accepted

PAIR = ["--draft", "qwen3-1.7b", "--target", "qwen3-32b"]
V0_LINE = ("INFO 10-16 19:05:06 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.361, "
           "System efficiency: 0.598, Number of speculative tokens: {k}, Number of accepted tokens: {a}, "
           "Number of draft tokens: {d}, Number of emitted tokens: 2500.\n")
PROM = "vllm:spec_decode_num_drafts_total {n}\nvllm:spec_decode_num_draft_tokens_total {d}\n" \
       "vllm:spec_decode_num_accepted_tokens_total {a}\n"


def _calibrate(tmp_path, monkeypatch, capsys, text: str, *extra: str) -> tuple[int, str, str]:
    """Run calibrate on one file holding `text`: its exit code, stdout and stderr."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.txt").write_text(text)
    code = main(["calibrate", "m.txt", *PAIR, "--out", "a.toml", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("text", [V0_LINE.format(k=3, a=1300, d=3600), PROM.format(n=1200, d=3600, a=1300)])
def test_sources_without_per_position_counts_make_a_prior(tmp_path, monkeypatch, capsys, text):
    code, out, err = _calibrate(tmp_path, monkeypatch, capsys, text)
    assert (code, err) == (0, "")
    assert "1,200 drafts of k = 3" in out and "alpha 0." in out
    assert "per_position" not in (tmp_path / "a.toml").read_text()


@pytest.mark.parametrize("k", [1, 3, 32])
@pytest.mark.parametrize("alpha", [0.3, 0.9])
def test_the_population_mean_holds_over_every_spread_a_scenario_allows(alpha, k):
    # near spread 0 each request accepts all (rate 1, with probability alpha) or nothing: a
    # request at 1 needs 1 verification per k + 1 tokens, one at 0 needs one per token
    bernoulli = alpha * k / (k + 1) / ((1 - alpha) + alpha / (k + 1))
    assert accepted_per_draft(alpha, k, 1e-300) == pytest.approx(bernoulli, rel=1e-12)
    # a vast spread is one rate for every request
    assert accepted_per_draft(alpha, k, 1e9) == pytest.approx(accepted_per_draft(alpha, k), rel=1e-8)
    for spread in (1e-300, 1e-3, 20.0, 3e3, 1e5, 1e9):
        mean = accepted_per_draft(alpha, k, spread)
        assert alpha_for_accepted(mean, k, spread) == pytest.approx(alpha, rel=1e-9)
