"""--intervals with a fitted profile: its bootstrap is drawn, one input per term, and the catalog
cost numbers whose every step cost it prices are not (a profile lacking terms keeps the numbers
those price); the workload's are, whatever prices the steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from psdsim.calibration.calibrate import calibrate
from psdsim.cli import main
from psdsim.sim.model_error import FIELDS_BY_PASS
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile_reader import load_profile
from psdsim.sim.profile_schema import TERMS
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.sensitivity import rank_inputs
from psdsim.sim.uncertain_inputs import uncertain_inputs
from psdsim.sim.uncertainty import interval, make_draws
from psdsim.studies.intervals import propagate
from psdsim.studies.plan_intervals import _drawn
from tests.helpers import paths
from tests.helpers.intervals import FAST, L40S

SAMPLE_TRACE = paths.ROOT / "examples" / "sample-trace.sqlite"
SMALL = Scenario(requests=24, output_len=16, m=4, prompt_len=32)
ACCEPTANCE = "acceptance qwen3-1.7b -> qwen3-32b"
RESAMPLED = {f"profile {term}" for term in TERMS}
MODEL_ERRORS = set(FIELDS_BY_PASS)   # drawn whatever prices the passes (sim/model_error.py)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> tuple[str, str]:
    """The sample trace's profile with its bootstrap, and the same profile without it."""
    folder = tmp_path_factory.mktemp("profiles")
    text = calibrate([SAMPLE_TRACE]).profile.to_json()
    point = json.loads(text)
    del point["bootstrap"]
    write_file(folder / "p.json", text)
    write_file(folder / "point.json", json.dumps(point))
    return str(folder / "p.json"), str(folder / "point.json")


def _names(s: Scenario) -> set[str]:
    return {i.name for i in uncertain_inputs(s, ["psd"])}


def test_a_profile_pricing_every_step_leaves_the_prompt_lengths_drawn(profiles) -> None:
    """A profile fits step costs, not the workload: the dataset's prompt-length range stays."""
    _, point = profiles
    dataset = SMALL.replace(prompt_len=0)
    assert "datasets.sharegpt.components.0.mu" in _names(dataset)
    assert _names(dataset.replace(profile=point)) == {"datasets.sharegpt.components.0.mu", ACCEPTANCE,
                                                      "seed"} | MODEL_ERRORS


def test_a_point_profile_draws_as_before(profiles) -> None:
    _, point = profiles
    s = SMALL.replace(profile=point)
    assert _names(s) == {ACCEPTANCE, "seed"} | MODEL_ERRORS
    inputs = uncertain_inputs(s, ["psd"])
    assert all(d.profile_json == "" for d in make_draws(s, ["psd"], inputs, np.full((2, len(inputs)), 0.5)))


def test_a_bootstrapped_profile_is_one_input_per_term_and_a_draw_takes_whole_vectors(profiles) -> None:
    boot, _ = profiles
    s = SMALL.replace(profile=boot)
    assert _names(s) == RESAMPLED | {ACCEPTANCE, "seed"} | MODEL_ERRORS
    vectors = load_profile(boot).bootstrap.terms
    inputs = [i for i in uncertain_inputs(s, ["psd"]) if i.name in RESAMPLED]
    cheapest, dearest = make_draws(s, ["psd"], inputs, np.array([[0.0] * len(inputs), [0.999] * len(inputs)]))
    for draw, end in ((cheapest, 0), (dearest, -1)):
        terms = json.loads(draw.profile_json)["terms"]
        assert "bootstrap" not in json.loads(draw.profile_json)
        assert all(tuple(terms[name]["coef"]) == vectors[name][end] for name in TERMS)

    def throughput(draw) -> float:
        path = Path(s.profile).with_name("drawn.json")
        path.write_text(draw.profile_json)
        return simulate(s.replace(profile=str(path))).summary["throughput_tok_s"]

    assert throughput(cheapest) > throughput(dearest)


def test_a_fitted_profile_narrows_the_interval_and_its_replaced_inputs_leave_the_ranking(profiles) -> None:
    boot, _ = profiles
    without, fitted = propagate(SMALL, 16, workers=1), propagate(SMALL.replace(profile=boot), 16, workers=1)

    def width(p) -> float:
        iv = interval(p.figure("psd", ("throughput_tok_s",)))
        return (iv.high - iv.low) / iv.median

    assert width(fitted) < width(without)
    ranked = {r.input.name for r in rank_inputs("psd throughput", fitted.values, fitted.inputs,
                                                fitted.figure("psd", ("throughput_tok_s",)))}
    assert ranked == RESAMPLED | {ACCEPTANCE, "seed"} | MODEL_ERRORS
    replaced = {i.name for i in without.inputs} - {ACCEPTANCE, "seed"} - MODEL_ERRORS
    assert replaced and not replaced & ranked


def test_a_plan_configuration_runs_on_its_draw_s_resampled_profile(profiles, tmp_path) -> None:
    boot, _ = profiles
    c = SMALL.replace(profile=boot)
    inputs = uncertain_inputs(c, ["psd"])
    drawn = _drawn(c, inputs, np.zeros(len(inputs)), str(tmp_path / "draw.toml"), tmp_path / "draw.json")
    assert drawn.profile == str(tmp_path / "draw.json")
    assert load_profile(drawn.profile).terms["verify"].coef == load_profile(boot).bootstrap.terms["verify"][0]


def test_a_draw_s_refusal_names_the_user_s_profile_not_a_temporary_file(profiles, tmp_path, capsys) -> None:
    """Bootstrap vectors of zeros price a verify pass at 0 ms: the draw that picks one was refused
    naming /tmp/psdsim-draw-XXXX/profile.json (plan: draw-0-config-0.json), a file the user never
    wrote and which was gone by the time they read it."""
    from tests.helpers.intervals import PLAN

    doc = json.loads(Path(profiles[0]).read_text())
    vectors = doc["bootstrap"]["terms"]["verify"]
    for i in range(len(vectors)):
        vectors[i] = [0.0] * len(vectors[i])
    zeros = tmp_path / "zeros.json"
    write_file(zeros, json.dumps(doc))
    (tmp_path / "plan.toml").write_text(PLAN.replace("[base]\n", f'[base]\nprofile = "{zeros}"\n'))
    for argv in (["run", "--set", "requests=8", "--set", "output_len=8",
                  "--profile", str(tmp_path / "zeros.json"), "--no-write", "--intervals", "2"],
                 ["plan", str(tmp_path / "plan.toml"), "--intervals", "2", "--workers", "1", "--no-figures",
                  "--out", str(tmp_path / "p")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"psdsim: error: profile: in a draw of --intervals: {tmp_path / 'zeros.json'} "
                              "with bootstrap vectors drawn from it: prices a verify pass at 0 ms"), err
        assert "psdsim-draw" not in err and "draw-0" not in err and "\n" not in err
        assert "narrow the range that value is drawn from, or run without --intervals" in err


PASSES = ("draft", "verify", "prefill", "draft_prefill", "reject")   # what one-process traces fit
ENGINE = "engines.vllm-0.9.2-v0-eager"
LINK = {f"links.pcie4.{name}" for name in ("p2p_latency_us", "p2p_bandwidth_gbps", "allreduce_latency_us")}
FRAMEWORK = {f"{ENGINE}.{name}" for name in ("step_ms", "step_request_us", "output_request_us")}
GPU_NUMBERS = {"mem_efficiency", "compute_efficiency",
               "gpus.l40s.memory_bandwidth_gbps", "gpus.l40s.bf16_tflops",
               f"{ENGINE}.kernel_us", f"{ENGINE}.launch_us", f"{ENGINE}.sampler_vocab_bytes"}


def _with_terms(boot: str, terms: tuple[str, ...], path: Path) -> str:
    """The sample trace's profile with only `terms` fitted (and bootstrapped)."""
    doc = json.loads(Path(boot).read_text())
    doc["terms"] = {t: v for t, v in doc["terms"].items() if t in terms}
    doc["bootstrap"]["terms"] = {t: v for t, v in doc["bootstrap"]["terms"].items() if t in terms}
    write_file(path, json.dumps(doc))
    return str(path)


@pytest.fixture
def gpu_catalog(tmp_path) -> str:
    """The built-in L40S with ranges on its bandwidth and FLOPs, as a user's catalog carries them."""
    path = tmp_path / "gpus.toml"
    path.write_text(L40S + 'memory_bandwidth_gbps_range = { spread = 0.1, why = "datasheet" }\n'
                    'bf16_tflops_range = { spread = 0.1, why = "datasheet" }\n')
    return str(path)


def test_a_profile_of_the_passes_takes_out_the_gpu_numbers_and_keeps_the_link_and_the_framework(
        profiles, gpu_catalog, tmp_path) -> None:
    """Fitted passes and rejection sampling leave the catalog the messages (comm, broadcast) and the
    per-step framework work (overhead): only the numbers that price those are drawn still."""
    boot, _ = profiles
    s = SMALL.replace(catalog=gpu_catalog)
    assert _names(s) >= GPU_NUMBERS | LINK | FRAMEWORK
    fitted = s.replace(profile=_with_terms(boot, PASSES, tmp_path / "passes.json"))
    assert _names(fitted) == (LINK | FRAMEWORK | {f"profile {t}" for t in PASSES} | {ACCEPTANCE, "seed"}
                              | MODEL_ERRORS)


def test_verify_and_draft_alone_leave_the_gpu_numbers_drawn(profiles, gpu_catalog, tmp_path) -> None:
    """Prefill passes (prefill, draft_prefill) and rejection sampling still run on the catalog's
    GPU numbers: only what prices drafting alone, the spec-decode worker's bookkeeping, drops."""
    boot, _ = profiles
    s = SMALL.replace(catalog=gpu_catalog)
    fitted = s.replace(profile=_with_terms(boot, ("verify", "draft"), tmp_path / "vd.json"))
    spec_worker = {f"{ENGINE}.spec_worker_{x}" for x in ("ms", "request_us", "draft_us")}
    assert _names(s) - _names(fitted) == spec_worker
    assert _names(fitted) >= GPU_NUMBERS


def test_what_a_partial_profile_takes_out_moves_nothing_and_what_it_keeps_moves_the_run(
        profiles, tmp_path) -> None:
    boot, _ = profiles
    fitted = SMALL.replace(profile=_with_terms(boot, PASSES, tmp_path / "passes.json"))
    every = {i.name: i for i in uncertain_inputs(SMALL, ["psd"])}

    def at_top(name: str) -> dict:
        (draw,) = make_draws(fitted, ["psd"], [every[name]], np.array([[0.999]]))
        s = draw.scenario
        if draw.catalog_toml:
            path = tmp_path / "drawn.toml"
            path.write_text(draw.catalog_toml)
            s = s.replace(catalog=str(path))
        return simulate(s).summary

    point = simulate(fitted).summary
    for name in ("mem_efficiency", f"{ENGINE}.launch_us", f"{ENGINE}.sync_us"):
        assert at_top(name) == point, name
    for name in ("links.pcie4.p2p_latency_us", f"{ENGINE}.step_ms"):
        assert at_top(name)["throughput_tok_s"] != point["throughput_tok_s"], name


def test_a_gpu_s_memory_stays_drawn_under_a_profile_of_every_term(profiles, tmp_path) -> None:
    """A GPU's memory sizes the KV cache, which no profile prices."""
    _, point = profiles
    path = tmp_path / "mem.toml"
    path.write_text(L40S + 'memory_gb_range = { spread = 0.05, why = "usable memory" }\n')
    assert "gpus.l40s.memory_gb" in _names(SMALL.replace(catalog=str(path), profile=point))


def test_run_with_a_profile_of_the_passes_narrows_the_interval_and_its_sensitivities_lose_the_gpu(
        profiles, gpu_catalog, tmp_path, capsys) -> None:
    """The issue's "a profile fitted from the user's own traces replaces a constant: that input drops
    out of the ranking and the interval narrows", through `psdsim run --intervals`."""
    boot, _ = profiles
    passes = _with_terms(boot, PASSES, tmp_path / "passes.json")

    def run(out: str, *more: str) -> tuple[float, set[str]]:
        assert main(["run", *FAST, "--set", f"catalog={gpu_catalog}", *more, "--intervals", "16",
                     "--out", str(tmp_path / out)]) == 0
        capsys.readouterr()
        iv = json.loads((tmp_path / out / "intervals.json").read_text())["figures"]["psd"]["throughput_tok_s"]
        rows = (tmp_path / out / "sensitivity.csv").read_text().splitlines()[1:]
        return (iv["high"] - iv["low"]) / iv["median"], {r.split(",")[1] for r in rows}

    (wide, catalog_ranked), (narrow, fitted_ranked) = run("catalog"), run("passes", "--profile", passes)
    assert narrow < wide
    assert catalog_ranked >= GPU_NUMBERS and not GPU_NUMBERS & fitted_ranked
    assert fitted_ranked >= LINK and {f"profile {t}" for t in PASSES} <= fitted_ranked
