"""The paper's presets, and `psdsim paper`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psdsim.calibration.synthetic import CostLog
from psdsim.cli import main
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.memory import plan_memory
from psdsim.sim.presets import PRESETS
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_scenario(name):
    s = load_scenario(preset=name)
    assert s.name == name and s.requests == 1000 and s.output_len == 256
    assert s.gpu_memory_utilization == 0.65 and not s.chunked_prefill


def test_setting7_runs_parallel_only_because_sd_may_not_fit():
    """The scripts run experiment_6 in parallel only (the blog: SD OOMs). Under vLLM V0's KV
    sizing (tests/sim/test_memory.py) co-located SD leaves GPU 0 under half a GB: the run warns."""
    s = load_scenario(preset="setting7")
    sd = plan_memory(s.replace(method="sd"), catalog_for(s))
    assert any("may run out of memory" in w for w in sd.warnings)
    psd = plan_memory(s, catalog_for(s))
    assert psd.fits and not psd.warnings


def test_c10_needs_an_h200_class_gpu():
    s = load_scenario(preset="c10")
    assert plan_memory(s, catalog_for(s)).fits
    assert not plan_memory(s.replace(gpu="l40s"), catalog_for(s)).fits


def test_preset_then_file_then_set(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text("k = 5\nm = 8\n")
    s = load_scenario(f, ["m=4"], preset="setting6")
    assert (s.target, s.k, s.m) == ("llama-3.3-70b-awq", 5, 4)


def test_vicuna_eagle_preset_sends_the_target_hidden_states_back():
    """setting5's return message per scored position: the sampled id (8 bytes), float32
    probabilities and log-probabilities over Vicuna's 32,000-token vocabulary, and the EAGLE head's
    input, the target's bf16 hidden state of 5,120 values (lmsys/vicuna-13b-v1.3 config.json);
    plus a 16-byte header (sim/messages.py). A full sub-batch verifies m x (k + 1) positions."""
    s = load_scenario(None, ["requests=40", "output_len=32"], preset="setting5")
    log = CostLog(AnalyticCost(s, catalog_for(s)))
    assert simulate(s, cost=log).fits
    sizes = {attrs["bytes"] for term, attrs, _ in log.calls if term == "comm"}
    full = s.m * (s.k + 1)
    # one send per tensor (send_sampler_output_to_driver): header, ids, probabilities and
    # log-probabilities, hidden states, the prefill hidden states' length
    assert {16, full * 8, full * 4 * 32_000, full * 2 * 5_120, 8} <= sizes


@pytest.mark.slow
def test_paper_quick_writes_its_table_and_figures(tmp_path, capsys):
    out = tmp_path / "paper"
    # short outputs keep 240 simulations (5 k x 4 datasets x 6 methods x 2 repeats) quick
    assert main(["paper", "--preset", "setting2", "--quick", "--repeats", "2", "--set", "output_len=32",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "max vs SD" in text and "sharegpt/psd" in text and "each the mean of 2" in text
    names = {p.name for p in out.iterdir()}
    for fig in ("throughput_vs_k", "e2el_vs_k", "per_gpu_vs_k"):
        assert f"{fig}.png" in names and f"{fig}.svg" in names
    report = json.loads((out / "paper.json").read_text())
    assert report["quick"] and len(report["improvements"]) == 8 and report["repeats"] == 2
    assert all(g["best_throughput_std"] is not None for g in report["improvements"].values())
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 5 * 4 * 6  # k x datasets x methods
    assert "throughput_tok_s_std" in rows[0] and "repeats" in rows[0]
    assert Path(out / "scenario.toml").exists()


def test_paper_repeats_below_one_is_a_clean_error(tmp_path, capsys):
    assert main(["paper", "--quick", "--repeats", "0", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--repeats" in err and "must be >= 1" in err and err.count("\n") == 1
    assert not (tmp_path / "p").exists()


def test_unknown_preset_is_a_clean_error(capsys):
    assert main(["run", "--preset", "setting99"]) == 2   # argparse choices, as the CLI's one line
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: --preset: invalid choice: 'setting99'") and err.count("\n") == 1
