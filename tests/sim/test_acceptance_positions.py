"""Acceptance by draft position: an acceptance prior's `per_position` factors, the sampler that
draws them, the closed form E[G] = sum_j p_1 ... p_j they must meet, calibrate writing the field
and a run reading it, and the values a catalog may not hold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.acceptance import AcceptanceSampler, accepted_per_draft, alpha_for_accepted
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
from psdsim.theory import expected_accepted, expected_accepted_iid

FACTORS = (1.0, 0.9, 0.75, 0.6)
PAIR = '[acceptance."qwen3-0.6b -> qwen3-32b"]'


def _rates(a: float, k: int, factors=FACTORS) -> list[float]:
    """Position j's conditional rate a f_j, the last factor repeated past the list."""
    return [a * factors[min(j, len(factors) - 1)] for j in range(k)]


def _sd_of_accepted(rates: list[float]) -> float:
    """Standard deviation of G from its survival S_j: E[G^2] = sum_j (2j - 1) S_j."""
    survival = np.cumprod(rates)
    mean = survival.sum()
    return math.sqrt(float(((2 * np.arange(1, len(rates) + 1) - 1) * survival).sum()) - mean**2)


def test_the_closed_form_is_the_sum_of_survival_products():
    assert expected_accepted([0.5, 0.5, 0.5]) == expected_accepted_iid(0.5, 3) == 0.875
    assert expected_accepted([0.8, 0.5, 0.25]) == pytest.approx(0.8 + 0.4 + 0.1)
    assert expected_accepted_iid(1.0, 4) == 4.0
    with pytest.raises(ValueError):
        expected_accepted([0.5, 1.5])


@pytest.mark.parametrize("a, k", [(0.7, 4), (0.85, 7), (0.5, 2)])
def test_the_sampler_accepts_what_the_closed_form_says(a, k):
    # k = 7 runs past the four factors: positions 5-7 take the last one
    n = 200_000
    sampler = AcceptanceSampler(np.random.default_rng(3), FACTORS)
    accepted = sampler.accepted(np.full(n, math.log(a)), np.full(n, k, dtype=np.int64))
    rates = _rates(a, k)
    # the mean of n i.i.d. draws lies within 5 standard errors but once in ~1.7 million
    tolerance = 5 * _sd_of_accepted(rates) / math.sqrt(n)
    assert accepted.mean() == pytest.approx(expected_accepted(rates), abs=tolerance)
    assert accepted.max() <= k


def test_without_factors_the_sampler_draws_what_it_always_did():
    log_a, proposed = np.log(np.linspace(0.1, 0.9, 50)), np.arange(50, dtype=np.int64) % 6
    old = np.minimum((np.log(1.0 - np.random.default_rng(5).random(1 << 14))[:50] / log_a).astype(np.int64),
                     proposed)
    assert np.array_equal(AcceptanceSampler(np.random.default_rng(5)).accepted(log_a, proposed), old)


def test_factors_of_one_draw_what_iid_positions_do():
    log_a, proposed = np.log(np.linspace(0.1, 0.9, 50)), np.arange(50, dtype=np.int64) % 6
    plain = AcceptanceSampler(np.random.default_rng(5)).accepted(log_a, proposed)
    ones = AcceptanceSampler(np.random.default_rng(5), (1.0,)).accepted(log_a, proposed)
    assert np.array_equal(plain, ones)


def _catalog(tmp_path, per_position: str) -> str:
    path = tmp_path / "positions.toml"
    path.write_text(f'{PAIR}\nalpha = 0.7\nper_position = {per_position}\nsource = "a test"\n')
    return str(path)


def _sd(catalog: str, **extra: str):
    sets = {"catalog": catalog, "draft": "qwen3-0.6b", "method": "sd", "k": "4", "requests": "200",
            "output_len": "512", "max_model_len": "2048", "acceptance_spread": "1e9", **extra}
    return simulate(load_scenario(overrides=[f"{k}={v}" for k, v in sets.items()]))


@pytest.mark.parametrize("method", ["sd", "psd"])
def test_the_simulators_vsr_is_the_closed_form_over_k(tmp_path, method):
    # every request at 0.7 (a Beta of concentration 1e9), k = 4 drafts per verification; PSD
    # verifies the other sub-batch's drafts as SD verifies its own
    result = _sd(_catalog(tmp_path, str(list(FACTORS))), method=method)
    rates = _rates(0.7, 4)
    verifications = int(result.requests["verifications"].sum())
    # sampling: 5 standard errors of the mean over the run's verifications; and a request's last
    # verifications may draft fewer than k (its remaining output), moving the ratio by at most
    # one verification's share per request
    tolerance = 5 * _sd_of_accepted(rates) / math.sqrt(verifications) / 4 + 200 / verifications
    assert result.summary["vsr"] == pytest.approx(expected_accepted(rates) / 4, abs=tolerance)
    assert abs(result.summary["vsr"] - expected_accepted_iid(0.7, 4) / 4) > 5 * tolerance


def test_a_catalog_without_the_field_runs_bit_identically(tmp_path):
    path = tmp_path / "plain.toml"
    path.write_text(f'{PAIR}\nalpha = 0.7\nsource = "a test"\n')
    plain = _sd(str(path), requests="40")
    again = _sd(str(path), requests="40")
    shaped = _sd(_catalog(tmp_path, "[1.0, 0.8]"), requests="40")
    assert plain.summary == again.summary
    assert plain.summary["vsr"] != shaped.summary["vsr"]


# 1200 drafts of k = 3: 900 accept position 1, 600 positions 1-2, 300 all three (given the ones
# before: 0.75, 2/3, 1/2, falling with position).
PROM = """vllm:spec_decode_num_drafts_total{engine="0"} 1200.0
vllm:spec_decode_num_draft_tokens_total{engine="0"} 3600.0
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 1800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 900.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 300.0
"""


def test_calibrate_writes_the_field_and_a_run_reads_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.txt").write_text(PROM)
    assert main(["calibrate", "metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b"]) == 0
    capsys.readouterr()
    text = (tmp_path / "acceptance.toml").read_text()
    line = next(row for row in text.splitlines() if row.startswith("per_position = "))
    assert line == f"per_position = [1.0, {(2 / 3) / 0.75!r}, {0.5 / 0.75!r}]"
    alpha = float(next(row for row in text.splitlines() if row.startswith("alpha = ")).split("=")[1])
    factors = (1.0, (2 / 3) / 0.75, 0.5 / 0.75)
    assert accepted_per_draft(alpha, 3, 20.0, factors) == pytest.approx(1.5, abs=1e-9)
    assert alpha == pytest.approx(alpha_for_accepted(1.5, 3, 20.0, factors))
    s = load_scenario(overrides=["catalog=acceptance.toml", "draft=qwen3-0.6b", "method=sd", "k=3",
                                 "requests=600", "output_len=1024", "max_model_len=4096",
                                 "max_num_batched_tokens=4096"])
    assert simulate(s).summary["vsr"] == pytest.approx(1800 / 3600, abs=0.01)


@pytest.mark.parametrize("value", ["[1.0, 1.2]", "[0.9, 0.8]", "[1.0, 0.0]", "[]", "0.8", '["x"]',
                                   "[1.0, nan]"])
def test_bad_factors_are_one_line_naming_the_field(tmp_path, capsys, value):
    catalog = _catalog(tmp_path, value)
    assert main(["run", "--set", f"catalog={catalog}", "--set", "draft=qwen3-0.6b", "--set", "requests=4",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: ") and "per_position" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
