"""--intervals: the catalog's ranges, their propagation by simulation, and what it prints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.catalog import CatalogError, builtin_catalog, load_catalog
from psdsim.sim.model_error import ERROR_RANGES, PROFILE
from psdsim.sim.output.intervals import intervals_json
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.uncertain_inputs import UncertainInput, uncertain_inputs
from psdsim.sim.uncertainty import MIN_RANKED_DRAWS, QUANTILES, Interval, interval, make_draws
from psdsim.studies.intervals import propagate
from psdsim.theory.tail import tail_exact, verifications_pmf
from tests.helpers.intervals import FAST, L40S, PLAN, complete_profile

SMALL = Scenario(requests=24, output_len=16, m=4, prompt_len=32)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_catalog_ranges_sit_beside_their_values():
    cat = builtin_catalog()
    launch = cat.ranges[("engines", "vllm-0.9.2-v0-eager", "launch_us")]
    assert (launch.low, launch.high) == (25.0, 58.0) and "25-58" in launch.why
    assert cat.engines["vllm-0.9.2-v0-eager"].launch_us == 35.8   # the point value as engines.toml says
    spread = cat.ranges[("links", "pcie4", "allreduce_busbw_gbps")]   # { spread = 0.2 }
    assert (spread.low, spread.high) == pytest.approx((16.0, 24.0))
    for (table, key, name), r in cat.ranges.items():
        entry = {"engines": cat.engines, "links": cat.links}.get(table, {}).get(key)
        if entry is not None:
            assert r.low <= getattr(entry, name) <= r.high
    assert ("acceptance", "qwen3-1.7b -> qwen3-32b", "alpha") in cat.ranges


def test_a_user_entry_keeps_only_its_own_ranges(tmp_path):
    path = tmp_path / "cat.toml"
    path.write_text('[links.pcie4]\nname = "mine"\nnvlink = false\np2p_latency_us = 9.0\n'
                    'p2p_latency_us_range = { low = 8.0, high = 9.5, why = "measured" }\n'
                    'p2p_bandwidth_gbps = 24.0\nallreduce_latency_us = 30.0\nallreduce_busbw_gbps = 20.0\n'
                    'source = "my nccl-tests"\n')
    ranges = load_catalog(path).ranges
    assert ranges[("links", "pcie4", "p2p_latency_us")].high == 9.5
    assert ("links", "pcie4", "p2p_bandwidth_gbps") not in ranges   # the built-in range was of 22.0
    assert ("links", "pcie5", "p2p_bandwidth_gbps") in ranges


@pytest.mark.parametrize("spec, problem", [
    ("{ low = 20.0, high = 30.0, why = 'x' }", "must lie within"),
    ("{ low = 1.0, high = 30.0 }", "write { low"),
    ("{ low = 1.0, high = 30.0, why = '' }", "non-empty why"),
])
def test_a_bad_range_is_refused_by_name(tmp_path, spec, problem):
    path = tmp_path / "cat.toml"
    path.write_text(f'[engines.vllm-v1]\nname = "v1"\nkind = "execution"\nkernels_per_layer = 10\n'
                    f'kernel_us = 5.3\nkernel_us_range = {spec}\nsource = "s"\n')
    with pytest.raises(CatalogError, match=problem) as exc:
        load_catalog(path)
    assert "kernel_us_range" in str(exc.value)


PCIE4 = ('[links.pcie4]\nname = "mine"\nnvlink = false\np2p_latency_us = 10.0\np2p_bandwidth_gbps = 22.0\n'
         'allreduce_latency_us = 30.0\nallreduce_busbw_gbps = 20.0\nsource = "s"\n')
PRIOR = '[acceptance."qwen3-1.7b -> qwen3-32b"]\nalpha = 0.61\nsource = "s"\n'
QWEN = ('[models.qwen3-32b]\nhf_id = "Qwen/Qwen3-32B"\nlayers = 64\nhidden = 5120\nintermediate = 25600\n'
        'heads = 64\nkv_heads = 8\nhead_dim = 128\nvocab = 151936\ntie_embeddings = false\nqk_norm = true\n'
        'bytes_per_param = 2.0\nsource = "s"\n')
DATASET = '[datasets.mine]\nmax_requests = 0\nmin_prompt = 1\nmax_prompt = 100\nsource = "s"\n'
ENGINE = ('[engines.mine]\nname = "m"\nkind = "execution"\nkernels_per_layer = 10\nkernel_us = 5.3\n'
          'source = "s"\n')


@pytest.mark.parametrize("text, says", [
    (L40S + 'memory_bandwidth_gbps_range = { spread = 2.0, why = "w" }\n',
     "[l40s] memory_bandwidth_gbps_range: its low end -864: field 'memory_bandwidth_gbps' must be >= 0"),
    (L40S + 'memory_bandwidth_gbps_range = { low = 0.0, high = 900.0, why = "w" }\n',
     "[l40s] memory_bandwidth_gbps_range: its low end 0: memory, bandwidth and TFLOPS must be at least"),
    # both ends pass (0: no FP8 tensor cores), the draws between them below 0.001 TFLOPS do not:
    # a draw was refused mid-run naming the draw's own temporary catalog.toml
    (L40S.replace("fp8_tflops = 733.0", "fp8_tflops = 0.0")
     + 'fp8_tflops_range = { low = 0.0, high = 0.002, why = "w" }\n',
     "[l40s] fp8_tflops_range: a range of fp8_tflops must lie at or above 0.001 TFLOPS (0 means no FP8"),
    (L40S + 'fp8_tflops_range = { low = 0.0, high = 800.0, why = "w" }\n', "got [0, 800]"),
    (PCIE4 + 'p2p_bandwidth_gbps_range = { spread = 1.5, why = "w" }\n',
     "[pcie4] p2p_bandwidth_gbps_range: its low end -11: field 'p2p_bandwidth_gbps' must be >= 0"),
    (PRIOR + 'alpha_range = { spread = 0.9, why = "w" }\n',
     "[qwen3-1.7b -> qwen3-32b] alpha_range: its high end 1.159: alpha must be in (0, 1 - 1e-9]"),
    (QWEN + 'layers_range = { low = 1, high = 64, why = "w" }\n',
     "[qwen3-32b] layers_range: a model's shape is exact (its config.json), not drawn; ranges are drawn on"),
    (DATASET + 'components = [{ weight = 1.0, weight_range = { spread = 0.1, why = "w" }, mu = 3.0, '
               'sigma = 0.5 }]\n', "[mine] components[0].weight_range: not drawn; ranges are drawn on"),
    (DATASET + 'max_prompt_range = { low = 50, high = 100, why = "w" }\ncomponents = [{ weight = 1.0, '
               'mu = 3.0, sigma = 0.5 }]\n', "[mine] max_prompt_range: not drawn"),
    (DATASET + 'components = [{ weight = 1.0, mu = 3.0, sigma = 0.5, sigma_range = { spread = 1.5, '
               'why = "w" } }]\n', "[mine] components[0].sigma_range: its low end -0.25: a component's"),
    (ENGINE + 'kernels_per_layer_range = { low = 8, high = 12, why = "w" }\n',
     "[mine] kernels_per_layer_range: 'kernels_per_layer' is a count, which is not drawn"),
])
def test_a_range_is_refused_at_load_past_its_fields_bounds_or_where_it_is_never_drawn(tmp_path, text, says):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    assert str(exc.value).startswith("mine.toml [") and says in str(exc.value)


def test_a_gpu_range_of_your_catalog_is_drawn(tmp_path, capsys):
    path = tmp_path / "mine.toml"
    path.write_text(L40S + 'memory_bandwidth_gbps_range = { spread = 0.1, why = "datasheet" }\n')
    s = SMALL.replace(catalog=str(path))
    (bw,) = [i for i in uncertain_inputs(s, ["psd"]) if i.table == "gpus"]
    assert (bw.key, bw.field) == ("l40s", "memory_bandwidth_gbps")
    assert (bw.low, bw.high) == pytest.approx((777.6, 950.4))
    (draw,) = make_draws(s, ["psd"], [bw], np.array([[1.0]]))
    drawn = tmp_path / "draw.toml"
    drawn.write_text(draw.catalog_toml)
    assert load_catalog(drawn).gpus["l40s"].memory_bandwidth_gbps == pytest.approx(950.4)


def test_only_acceptance_uncertain_gives_the_closed_form_step_interval():
    """PSD's decode steps over acceptance draws, 32 requests in two sub-batches of 16 (no refills):
    theory.tail's exact expectation at the drawn acceptances' 95th and 5th percentiles bounds the
    interval (steps fall as acceptance rises), within 5 %."""
    s = Scenario(method="psd", m=16, k=3, output_len=128, prompt_len=32, requests=32,
                 acceptance_spread=1e6)   # every request at the drawn mean, as the closed form
    acceptance = UncertainInput("acceptance", 0.5, 0.8, "test", field="acceptance")
    prop = propagate(s, MIN_RANKED_DRAWS, inputs=[acceptance], workers=1)
    steps = interval(prop.figure("psd", ("decode_steps",)))
    low_a, _, high_a = np.quantile(prop.values[:, 0], QUANTILES)

    def theory(a: float) -> float:
        return tail_exact(32, 16, verifications_pmf(128, 3, a, None)).decode_steps

    assert steps.low == pytest.approx(theory(high_a), rel=0.05)
    assert steps.high == pytest.approx(theory(low_a), rel=0.05)
    assert steps.high - steps.low > 0.3 * steps.median   # a real spread, not a point


def test_an_input_of_zero_range_leaves_every_figure_a_point():
    flat = UncertainInput("mem_efficiency", 0.81, 0.81, "test", field="mem_efficiency")
    prop = propagate(SMALL, 4, inputs=[flat], workers=1)
    doc = intervals_json(prop, ["psd"], [])
    for iv in doc["figures"]["psd"].values():
        assert iv["low"] == iv["median"] == iv["high"]


def test_the_json_quotes_a_level_only_where_the_text_prints_an_interval():
    flat = UncertainInput("mem_efficiency", 0.80, 0.82, "test", field="mem_efficiency")
    few = intervals_json(propagate(SMALL, 4, inputs=[flat], workers=1), ["psd"], [])
    assert few["level"] is None and few["interval"].startswith("the range of the draws")
    assert few["sensitivity"]["ranked"] is False
    enough = intervals_json(propagate(SMALL, MIN_RANKED_DRAWS, inputs=[flat], workers=1), ["psd"], [])
    assert enough["level"] == 0.9 and enough["interval"] == "90% interval"
    assert enough["sensitivity"]["ranked"] is True


def test_a_ratio_on_shared_draws_is_narrower_than_its_quotient_of_intervals():
    prop = propagate(SMALL, 12, ["sd", "psd"], workers=1)
    path = ("throughput_tok_s",)
    psd, sd = interval(prop.figure("psd", path)), interval(prop.figure("sd", path))
    ratio = interval(prop.ratio("psd", "sd", path))
    assert ratio.high - ratio.low < psd.high / sd.low - psd.low / sd.high
    assert psd.low / sd.high <= ratio.median <= psd.high / sd.low


def test_the_same_seed_gives_the_same_intervals_bit_for_bit():
    def doc(seed: int) -> str:
        s = SMALL.replace(seed=seed)
        return json.dumps(intervals_json(propagate(s, 4, ["sd", "psd"], workers=2), ["sd", "psd"],
                                         [("psd", "sd")]))

    assert doc(3) == doc(3)
    assert doc(3) != doc(4)


def test_inputs_the_user_gave_are_not_drawn():
    names = {i.name for i in uncertain_inputs(SMALL, ["psd"])}
    assert {"acceptance qwen3-1.7b -> qwen3-32b", "mem_efficiency", "engines.vllm-0.9.2-v0-eager.launch_us",
            "seed"} <= names
    given = {i.field for i in uncertain_inputs(SMALL.replace(acceptance=0.6, mem_efficiency=0.7), ["psd"])}
    assert "acceptance" not in given and "mem_efficiency" not in given
    assert "acceptance" not in {i.field for i in uncertain_inputs(SMALL, ["ar"])}


def test_a_user_catalog_is_kept_under_the_draws(tmp_path):
    """A draw's catalog is the user's file with the drawn entries merged over it: a model only the
    user's file defines still resolves."""
    path = tmp_path / "cat.toml"
    path.write_text('[gpus.mine]\nname = "my GPU"\nmemory_gb = 48.0\nmemory_bandwidth_gbps = 900.0\n'
                    'bf16_tflops = 360.0\nnvlink = false\nhost_link = "pcie4"\nsource = "mine"\n')
    s = SMALL.replace(catalog=str(path), gpu="mine")
    prop = propagate(s, 3, workers=1)
    assert prop.fits("psd") == 3


def test_run_and_compare_without_intervals_print_what_they_did(capsys):
    assert main(["run", *FAST, "--json", "--no-write"]) == 0
    assert "intervals" not in json.loads(capsys.readouterr().out)
    assert main(["compare", *FAST, "--json", "--no-write"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"scenario", "summaries", "ratios"}


def test_run_with_intervals_adds_them_and_writes_the_sensitivities(capsys, tmp_path):
    assert main(["run", *FAST, "--json", "--no-write"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["run", *FAST, "--intervals", str(MIN_RANKED_DRAWS), "--out", "r"]) == 0
    text = capsys.readouterr().out
    assert f"over {MIN_RANKED_DRAWS} draws" in text and "what to measure first" in text
    assert json.loads((tmp_path / "r" / "summary.json").read_text()) == plain   # the point run unchanged
    iv = json.loads((tmp_path / "r" / "intervals.json").read_text())["figures"]["psd"]["throughput_tok_s"]
    assert iv["low"] <= iv["median"] <= iv["high"]
    csv = (tmp_path / "r" / "sensitivity.csv").read_text().splitlines()
    assert csv[0].startswith("figure,input,spearman_rho,rho_squared,draws") and len(csv) > 3
    assert (tmp_path / "r" / "sensitivity.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_with_intervals_prints_median_and_interval(capsys):
    assert main(["compare", *FAST, "--methods", "sd,psd", "--intervals", "4", "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "psd/sd" in out.split("intervals: median")[1]
    assert "–" in out and "what to measure first, for psd/sd throughput" in out


def test_fewer_draws_than_a_ranking_needs_print_their_range_and_rank_nothing(capsys):
    """Two draws printed a "90% interval", a chance threshold |rho| = 1.65 and a ranking; at four
    the point run lay outside its "interval"."""
    assert main(["run", *FAST, "--no-write", "--intervals", "4"]) == 0
    out = capsys.readouterr().out
    assert ("intervals: median (the range of the draws; a 90% interval needs --intervals 16 or more) "
            "over 4 draws") in out
    assert "not ranked over 4 draws" in out and "by chance" not in out and "rho²" not in out
    assert main(["run", *FAST, "--out", "few", "--intervals", "4"]) == 0
    doc = json.loads(Path("few/intervals.json").read_text())["sensitivity"]
    assert doc["ranked"] is False and doc["ranks"] == []   # the old code listed 4 draws' rho of chance
    assert not Path("few/sensitivity.csv").exists() and not Path("few/sensitivity.png").exists()
    draws = np.array([3.0, 1.0, 2.0, 10.0])
    assert interval(draws) == Interval(2.5, 1.0, 10.0)


def test_a_figure_no_draw_gives_is_not_ranked(capsys):
    """One-token outputs have no decode throughput in any draw: the old code ranked every input
    at rho +0.00 against it over "16 draws" and wrote that table and its tornado."""
    assert main(["run", *FAST, "--set", "output_len=1", "--out", "r",
                 "--intervals", str(MIN_RANKED_DRAWS)]) == 0
    out = capsys.readouterr().out
    assert (f"what to measure first, for psd throughput: not ranked over 0 draws (of {MIN_RANKED_DRAWS}, "
            "the rest do not give it)") in out and "rho +0.00" not in out
    assert not Path("r/sensitivity.csv").exists() and not Path("r/sensitivity.png").exists()
    assert json.loads(Path("r/intervals.json").read_text())["sensitivity"]["ranks"] == []


def test_no_draw_that_fits_is_said_so_and_the_point_run_is_kept(capsys, tmp_path):
    """A catalog range of GPU memory most of which cannot hold the model: where no draw fit,
    intervals.json ended in StopIteration, a traceback, and the point run's results were lost."""
    base = load_catalog().gpus["l40s"]
    (tmp_path / "mem.toml").write_text(
        f'[gpus.l40s]\nname = "L40S"\nmemory_gb = 48.0\n'
        f'memory_gb_range = {{ low = 1.0, high = 48.0, why = "test" }}\n'
        f"memory_bandwidth_gbps = {base.memory_bandwidth_gbps}\nbf16_tflops = {base.bf16_tflops}\n"
        f'nvlink = false\nhost_link = "pcie4"\nsource = "test"\n')
    for seed in range(8):   # the Latin hypercube of two draws misses the top 30 % in some seeds
        assert main(["run", *FAST, "--set", "catalog=mem.toml", "--set", f"seed={seed}",
                     "--out", f"r{seed}", "--intervals", "2"]) == 0
        doc = json.loads(Path(f"r{seed}/intervals.json").read_text())
        assert Path(f"r{seed}/summary.json").is_file()
        if doc["fits"]["psd"] == 0:
            break
    else:
        pytest.fail("no seed drew two draws of which neither fits")
    out = capsys.readouterr().out
    assert "note: psd fits in 0 of 2 draws" in out and doc["figures"] == {"psd": {}}


def test_plan_intervals_without_a_verdict_pair_print_no_empty_section(capsys, tmp_path):
    (tmp_path / "plan.toml").write_text(PLAN.replace('method = ["sd", "psd"]', 'k = [2, 3]'))
    assert main(["plan", "plan.toml", "--intervals", "3", "--workers", "1", "--no-figures",
                 "--out", "b"]) == 0
    assert "with intervals" not in capsys.readouterr().out


@pytest.mark.parametrize("n", ["1", "0", "5000"])
def test_a_bad_number_of_draws_is_one_line(capsys, n):
    assert main(["run", *FAST, "--no-write", "--intervals", n]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("psdsim: error: --intervals: must be 2..")


@pytest.mark.parametrize("n", ["\uff13", "1_0", " 3 ", "+3"])
def test_a_count_of_draws_is_plain_ascii_digits(capsys, n):
    assert main(["run", *FAST, "--no-write", "--intervals", n]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("psdsim: error: --intervals: must be a number of draws")


def _say_everything(monkeypatch) -> None:
    """Every estimate announced and every progress shown, however short the work."""
    monkeypatch.setattr("psdsim.commands.common.LONG_WORK_S", 0.0)
    monkeypatch.setattr("psdsim.commands.common.PROGRESS_AFTER_S", 0.0)


def test_the_draws_are_in_the_estimate_and_their_progress_counts_them(capsys, monkeypatch):
    _say_everything(monkeypatch)
    assert main(["run", *FAST, "--no-write", "--intervals", "4"]) == 0
    err = capsys.readouterr().err
    assert "psdsim: 24 requests, then 4 draws of them: about" in err and "/4 draws" in err


def test_plan_with_intervals_counts_the_draws_in_which_psd_pays(capsys, tmp_path):
    (tmp_path / "plan.toml").write_text(PLAN)
    assert main(["plan", "plan.toml", "--json", "--no-figures", "--workers", "1", "--out", "a"]) == 0
    assert "intervals" not in json.loads(capsys.readouterr().out)
    assert main(["plan", "plan.toml", "--intervals", "3", "--workers", "2", "--out", "b"]) == 0
    out = capsys.readouterr().out
    assert "with intervals (3 draws" in out and "what to measure first, for gain of psd" in out
    doc = json.loads((tmp_path / "b" / "plan.json").read_text())["intervals"]
    assert doc["level"] is None and doc["sensitivity"]["ranked"] is False   # 3 draws: their range
    assert "range of the draws" in out and doc["interval"].startswith("the range of the draws")
    (verdict,) = doc["verdicts"]
    assert 0 <= verdict["pays_in"] <= 3 and f"pays in {verdict['pays_in']} of 3 draws" in out
    gain = verdict["per_gpu_gain"]
    assert gain["low"] <= gain["median"] <= gain["high"]
    # three draws rank nothing: no table or tornado of chance correlations beside that line
    assert not (tmp_path / "b" / "sensitivity.csv").exists()
    assert not (tmp_path / "b" / "figures" / "sensitivity.png").exists()


def test_a_profile_fitting_every_term_takes_the_catalog_out_and_narrows_the_interval(tmp_path):
    """With every cost fitted from traces, the engine, link and efficiency ranges drop out: only
    acceptance, the model's error at the profile's (run-to-run drift) range and the seed are
    drawn, and the throughput interval is narrower."""
    profiled = SMALL.replace(profile=complete_profile(tmp_path / "p.json"))
    inputs = {i.name: (i.low, i.high) for i in uncertain_inputs(profiled, ["psd"])}
    drift = (ERROR_RANGES["verify_error", PROFILE].low, ERROR_RANGES["verify_error", PROFILE].high)
    assert inputs.keys() == {"acceptance qwen3-1.7b -> qwen3-32b", "verify_error", "draft_error", "seed"}
    assert inputs["verify_error"] == inputs["draft_error"] == drift
    # what was dropped indeed moves nothing: the extreme launch cost gives the same run
    launch = next(i for i in uncertain_inputs(SMALL, ["psd"]) if i.name.endswith(".launch_us"))
    (draw,) = make_draws(profiled, ["psd"], [launch], np.array([[1.0]]))
    path = tmp_path / "drawn.toml"
    path.write_text(draw.catalog_toml)
    assert simulate(profiled.replace(catalog=str(path))).summary == simulate(profiled).summary

    def width(s: Scenario) -> float:
        iv = interval(propagate(s, 8, workers=2).figure("psd", ("throughput_tok_s",)))
        return (iv.high - iv.low) / iv.median

    assert width(profiled) < width(SMALL)


SWEEP = """[base]
requests = 24
output_len = 16
m = 4
prompt_len = 32

[grid]
method = ["sd", "psd"]
"""


def test_a_plan_s_estimate_and_progress_count_its_draws(capsys, monkeypatch, tmp_path):
    _say_everything(monkeypatch)
    (tmp_path / "plan.toml").write_text(PLAN)
    assert main(["plan", "plan.toml", "--intervals", "2", "--workers", "1", "--no-figures",
                 "--out", "p"]) == 0
    err = capsys.readouterr().err
    assert "configurations × ~" in err and "runs each, then 2 draws of them: about" in err
    assert "draws: 100% 4/4 searches" in err


def test_a_sweep_s_estimate_and_dry_run_count_its_draws(capsys, monkeypatch, tmp_path):
    _say_everything(monkeypatch)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    assert main(["sweep", "sweep.toml", "--dry-run", "--intervals", "8"]) == 0
    assert "2 distinct runs × (1 + 8 draws) over method" in capsys.readouterr().out
    assert main(["sweep", "sweep.toml", "--dry-run", "--intervals", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["draws_per_run"] == 8
    assert main(["sweep", "sweep.toml", "--out", "s", "--workers", "1", "--no-figures",
                 "--intervals", "2"]) == 0
    assert "psdsim: 2 runs × (1 + 2 draws): about" in capsys.readouterr().err


def test_sweep_with_intervals_adds_interval_columns_and_reruns_for_another_n(capsys, tmp_path):
    import csv

    (tmp_path / "sweep.toml").write_text(SWEEP)
    assert main(["sweep", "sweep.toml", "--out", "s", "--workers", "1", "--no-figures", "--json"]) == 0
    plain = list(csv.DictReader((tmp_path / "s" / "results.csv").open()))
    assert not any(c.startswith("intervals_") for c in plain[0])
    capsys.readouterr()
    assert main(["sweep", "sweep.toml", "--out", "s", "--workers", "2", "--no-figures", "--json",
                 "--intervals", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["ran"] == 2   # runs without intervals are not reused
    rows = list(csv.DictReader((tmp_path / "s" / "results.csv").open()))
    for row, before in zip(rows, plain, strict=True):
        low, median, high = (float(row[f"intervals_throughput_tok_s_{q}"]) for q in ("low", "median", "high"))
        assert low <= median <= high
        assert row["throughput_tok_s"] == before["throughput_tok_s"]   # the point run as before


def test_a_dataset_length_range_moves_the_prompts_it_draws(tmp_path):
    """sharegpt's mu carries a range; a draw at its top gives longer prompts than one at its bottom."""
    r = builtin_catalog().ranges[("datasets", "sharegpt", "components.0.mu")]
    assert r.low < builtin_catalog().datasets["sharegpt"].components[0].mu < r.high
    (mu,) = [i for i in uncertain_inputs(SMALL.replace(prompt_len=0), ["psd"]) if i.table == "datasets"]
    assert "datasets" not in {i.table for i in uncertain_inputs(SMALL, ["psd"])}   # fixed prompts: none

    def mean_prompt(u: float) -> float:
        (draw,) = make_draws(SMALL.replace(prompt_len=0), ["psd"], [mu], np.array([[u]]))
        path = tmp_path / f"{u}.toml"
        path.write_text(draw.catalog_toml)
        return float(simulate(draw.scenario.replace(catalog=str(path))).requests["prompt_len"].mean())

    assert mean_prompt(1.0) > mean_prompt(0.0)


def test_a_plan_verdict_is_ranked_on_its_own_configuration_s_inputs(tmp_path):
    """Two drafters: each verdict's gain is ranked against its own draft pair's acceptance only."""
    from psdsim.studies.plan import load_plan
    from psdsim.studies.plan_intervals import plan_draws, plan_sensitivities, verdict_label
    from psdsim.studies.plan_verdict import run_plan

    drafts = 'method = ["sd", "psd"]\ndraft = ["qwen3-0.6b", "qwen3-1.7b"]'
    (tmp_path / "plan.toml").write_text(PLAN.replace('method = ["sd", "psd"]', drafts))
    spec = load_plan(tmp_path / "plan.toml")
    result = run_plan(spec, 1)
    drawn = plan_draws(spec, result.configs, 3, 2)
    labels = [verdict_label(v, list(spec.space)) for v in result.verdicts]
    for rank in plan_sensitivities(drawn, labels):
        if rank.input.field == "acceptance":
            draft = rank.figure.split("draft=")[1].split()[0]
            assert rank.input.name.startswith(f"acceptance {draft} ->")


def test_a_draw_outside_what_the_scenario_takes_is_said_to_be_a_draw(capsys, tmp_path):
    """A dataset whose mu range runs past the prompt window: the point run is fine, a draw near
    the range's top end is refused, and the refusal said nothing of a draw (the user's mu is 5)."""
    (tmp_path / "ds.toml").write_text(
        '[datasets.mine]\nmax_requests = 0\nmin_prompt = 16\nmax_prompt = 1792\n'
        'components = [{ weight = 1.0, mu = 5.0, sigma = 0.3, mu_range = { low = 5.0, high = 12.0, '
        'why = "test" } }]\nsource = "test"\n')
    argv = ["run", "--set", "requests=8", "--set", "output_len=8", "--set", "catalog=ds.toml",
            "--set", "dataset=mine", "--no-write"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "--intervals", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: dataset: in a draw of --intervals: mine: component 1")
    assert "\n" not in err
    assert err.endswith("narrow the range that value is drawn from, or run without --intervals")


def test_a_draw_s_refusal_names_each_temporary_file_by_its_source_in_one_pass():
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.uncertainty import drawn_refusal

    exc = ScenarioError("catalog", "/tmp/d/catalog.toml: GPU 'x' (in catalog.toml)", "correct it")
    drawn = {"/tmp/d/catalog.toml": "my/catalog.toml with values drawn from its ranges"}
    assert drawn_refusal(exc, drawn).problem == ("in a draw of --intervals: my/catalog.toml with values "
                                                 "drawn from its ranges: GPU 'x' (in my/catalog.toml with "
                                                 "values drawn from its ranges)")
