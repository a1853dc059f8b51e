"""Properties of psdsim's figures that a reader relies on: legends that name what the data is and
cover none of it, one colour scale where panels compare one metric, units on axes and bars."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest

from psdsim.sim.output.plots import occupancy_figure, occupancy_png
from psdsim.sim.run import simulate
from psdsim.studies.sweep_figures import heatmap_k_m_figure, metric_unit, throughput_vs_rate_figure
from tests.helpers.scenarios import small

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    """These tests look at the figures psdsim builds before they are saved (and closed): close
    them afterwards, so the figures of later tests are not counted against matplotlib's limit."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def legend_texts(fig: Any) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def legends_over_plots(fig: Any) -> list[tuple[str, str]]:
    """(legend's first label, axes' title or label) for each legend that overlaps a plot area."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [(legend.get_texts()[0].get_text(), ax.get_title() or ax.get_ylabel())
            for legend in legends for ax in fig.axes
            if legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))]


def sweep_rows() -> list[dict[str, Any]]:
    """Two methods on a (k, m, rate) grid whose values differ between methods, as the issue's
    sweep did (sd peaking at 380, psd at 448)."""
    rows = []
    for method, base in (("sd", 200.0), ("psd", 300.0)):
        for k in (2, 3, 4):
            for m in (8, 16):
                for rate in (2.0, 4.0, 8.0):
                    value = base + 10 * k + 5 * m + rate
                    rows.append({"status": "ok", "method": method, "k": k, "m": m, "rate": rate,
                                 "throughput_tok_s": value, "output_tok_s": 0.7 * value})
    return rows


SWEPT = ["method", "k", "m", "rate"]


@pytest.fixture(scope="module")
def psd_result() -> Any:
    return simulate(small(method="psd", requests=60))


def test_occupancy_legends_name_the_sub_batches(psd_result):
    texts = legend_texts(occupancy_figure(psd_result))
    assert {"sub-batch 0", "sub-batch 1"} <= set(texts)
    assert not any(word in text for text in texts for word in ("False", "True"))


def test_occupancy_of_the_ring_shows_every_decoding_request():
    """In the ring the step table's batch0 is only the sub-batch verified in the step: drawn alone
    as "decoding" it hid the others."""
    result = simulate(small(method="psd", requests=60, sub_batches=3, drafters=2))
    fig = occupancy_figure(result)
    assert {"sub-batch verified", "other sub-batches"} <= set(legend_texts(fig))
    top = max(band.get_paths()[0].vertices[:, 1].max() for band in fig.axes[0].collections)
    assert top == (result.steps["batch0"] + result.steps["batch1"] + result.steps["prefilling"]).max()


def marks(fig: Any, label: str) -> int:
    """How many points the running-set panel marks under the legend entry `label`."""
    lines = [line for line in fig.axes[0].get_lines() if line.get_label() == label]
    return sum(len(line.get_xdata()) for line in lines)


def test_occupancy_marks_every_adaptive_switch_and_only_those():
    result = simulate(small(method="adaptive", requests=12, acceptance=0.2, acceptance_spread=1e9))
    switches = int(result.steps["switch"].sum())
    assert switches > 0, "acceptance 0.2 must move the rule off PSD"
    assert marks(occupancy_figure(result), "mode switch (adaptive)") == switches


def test_occupancy_marks_the_steps_that_threw_pre_drafts_away(psd_result):
    result = simulate(small(method="psd", requests=12, m=1, k=3, output_len=30, acceptance=0.7,
                            acceptance_spread=2.0, seed=1, tail="pre-draft", rate=0.005))
    wasted = int((result.steps["pre_drafts_wasted"] > 0).sum())
    assert wasted > 0, "a low-rate tail with rejections throws pre-drafts away"
    assert marks(occupancy_figure(result), "pre-drafts thrown away (tail)") == wasted
    # a run that pre-drafts nothing and never switches is marked nowhere
    plain = occupancy_figure(psd_result)
    assert marks(plain, "pre-drafts thrown away (tail)") == marks(plain, "mode switch (adaptive)") == 0


def test_occupancy_legends_cover_no_panel(psd_result):
    assert legends_over_plots(occupancy_figure(psd_result)) == []


def test_occupancy_has_every_axis_labelled(psd_result):
    fig = occupancy_figure(psd_result)
    assert all(ax.get_ylabel() for ax in fig.axes)
    assert "(s)" in fig.axes[-1].get_xlabel()


def test_occupancy_png_is_deterministic_and_names_psdsim(psd_result):
    first = occupancy_png(psd_result)
    assert first == occupancy_png(psd_result)
    assert first.startswith(b"\x89PNG") and b"psdsim" in first[:200]


def test_heatmap_panels_share_one_colour_scale_with_a_unit():
    fig = heatmap_k_m_figure(sweep_rows(), SWEPT, "throughput_tok_s")
    images = [image for ax in fig.axes for image in ax.images]
    assert len(images) == 2
    assert images[0].norm.vmin == images[1].norm.vmin and images[0].norm.vmax == images[1].norm.vmax
    mean_rate = (2 + 4 + 8) / 3   # the cells average over the rates
    assert images[0].norm.vmin == pytest.approx(200 + 10 * 2 + 5 * 8 + mean_rate)    # sd's lowest cell
    assert images[0].norm.vmax == pytest.approx(300 + 10 * 4 + 5 * 16 + mean_rate)   # psd's highest
    bars = [ax for ax in fig.axes if not ax.images]
    assert len(bars) == 1 and "(tok/s)" in bars[0].get_ylabel()


def test_throughput_vs_rate_legend_is_outside_both_panels():
    fig = throughput_vs_rate_figure(sweep_rows(), SWEPT)
    assert len(legend_texts(fig)) == 12
    assert legends_over_plots(fig) == []


@pytest.mark.parametrize(("metric", "unit"), [
    ("throughput_tok_s", "tok/s"), ("throughput_tok_s_trim80", "tok/s"),
    ("throughput_tok_s_per_gpu", "tok/s per GPU"), ("latency_ms_p99", "ms"), ("e2el_ms", "ms"),
    ("makespan_s", "s"), ("goodput_req_s", "requests/s"), ("vsr", "fraction"),
    ("kv_peak_usage_verifier", "fraction"), ("decode_steps", ""),
])
def test_metric_units_follow_the_summary_names(metric, unit):
    assert metric_unit(metric) == unit


def validate_rows() -> list[dict[str, Any]]:
    """The reference validation's rows: AR once (k-less), SD and PSD per k, every metric."""
    from psdsim.engine.validate.report import METRICS

    def cells(scale: float) -> dict[str, dict[str, float]]:
        return {key: {"measured": scale * (n + 1), "predicted": 1.1 * scale * (n + 1)}
                for n, (key, _) in enumerate(METRICS)}

    rows = [{"label": "ar", "k": None, "metrics": cells(1.0)}]
    rows += [{"label": label, "k": k, "metrics": cells(scale * k)}
             for label, scale in (("sd", 1.5), ("psd", 2.0)) for k in (1, 2, 3)]
    return rows


def test_validate_figure_legend_is_outside_and_axes_carry_units():
    from psdsim.engine.validate.report import validate_figure

    fig = validate_figure(validate_rows())
    assert legends_over_plots(fig) == []
    assert "psd predicted" in legend_texts(fig)
    assert all("(" in ax.get_ylabel() and "k (" in ax.get_xlabel() for ax in fig.axes)


def test_paper_figure_legend_covers_no_panel():
    from psdsim.studies.paper import metric_vs_k_figure

    rows = [{"dataset": dataset, "method": method, "k": k, "fits": True, "e2el_ms": 500 + 100 * k + 50 * n}
            for dataset in ("arena", "sharegpt", "spec-bench", "tough")
            for n, method in enumerate(("sd", "psd", "psd+tetris", "pearl", "sd-2m", "sd-5gpu"))
            for k in range(1, 6)]
    fig = metric_vs_k_figure(rows, "e2el_ms", "E2EL (ms per request)", "setting2")
    assert len(legend_texts(fig)) == 6
    assert legends_over_plots(fig) == []


@pytest.fixture(scope="module")
def plan_result(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A small plan over method, k and m, so that every plan figure (the regime map too) is drawn."""
    from psdsim.studies.plan import load_plan
    from psdsim.studies.plan_verdict import run_plan

    path = tmp_path_factory.mktemp("plan") / "plan.toml"
    path.write_text('[base]\nrequests = 40\noutput_len = 32\n[space]\nmethod = ["sd", "psd"]\nk = [2, 3]\n'
                    'm = [4, 8]\n[slo]\nlatency_p99_ms = 20000\n[search]\ntolerance = 0.1\n')
    return run_plan(load_plan(path))


def test_plan_legends_cover_no_data_and_gpus_are_whole(plan_result):
    from psdsim.studies.plan_report import latency_cdf_figure, latency_vs_rate_figure, pareto_figure

    for figure in (pareto_figure, latency_vs_rate_figure, latency_cdf_figure):
        assert legends_over_plots(figure(plan_result)) == [], figure.__name__
    pareto = pareto_figure(plan_result)
    assert all(tick == int(tick) for tick in pareto.axes[0].get_xticks())
    assert "p99 objective (20 s)" in legend_texts(latency_vs_rate_figure(plan_result))


def test_regime_map_colours_reach_the_largest_gain(plan_result):
    from psdsim.studies.plan_report import regime_map_figure

    fig = regime_map_figure(plan_result)
    (image,) = fig.axes[0].images
    gains = [v["per_gpu_gain"] for v in plan_result.verdicts if v["per_gpu_gain"] is not None]
    assert image.norm.vmax >= max(gains) and image.norm.vmin <= min(gains)
    assert image.norm(1.0) == pytest.approx(0.5)   # break-even is the middle colour
    assert "(×)" in fig.axes[1].get_ylabel()


def test_regime_map_names_the_method_it_maps(plan_result):
    """Where the best verdict is the adaptive mode's, the map is of adaptive against SD, and says so."""
    from dataclasses import replace

    from psdsim.studies.plan_report import regime_map_figure

    assert "PSD's extra GPU" in regime_map_figure(plan_result).axes[0].get_title()
    adaptive = replace(plan_result, verdicts=[{**v, "method": "adaptive"} for v in plan_result.verdicts])
    fig = regime_map_figure(adaptive)
    assert "adaptive's extra GPU" in fig.axes[0].get_title()
    assert fig.axes[1].get_ylabel().startswith("adaptive / SD")


def test_theory_legends_cover_no_data_and_axes_say_their_units():
    from psdsim.studies.theory_report import per_token_figure, ratio_figure
    from psdsim.theory.model import FrontierModel

    model = FrontierModel(alpha=1.0, V=1.6783)
    for fig in (per_token_figure(model), ratio_figure(model)):
        assert legends_over_plots(fig) == []
        (ax,) = fig.axes
        assert "(" in ax.get_xlabel() and "(" in ax.get_ylabel()


def test_calibration_figure_says_what_its_line_is(tmp_path):
    import numpy as np

    from psdsim.calibration.calibrate import calibrate
    from psdsim.calibration.report import measured_vs_fitted_figure
    from psdsim.calibration.synthetic import CostLog, write_cost_trace
    from psdsim.sim.costs import AnalyticCost
    from psdsim.sim.scenario import catalog_for

    s = small(method="psd", requests=60)
    log = CostLog(AnalyticCost(s, catalog_for(s)))
    simulate(s, cost=log)
    trace = tmp_path / "run.sqlite"
    write_cost_trace(log.calls, trace, rng=np.random.default_rng(7), noise=0.02)
    fig = measured_vs_fitted_figure(calibrate([trace], source={"gpu": "l40s"}))
    assert "fitted = measured" in fig.get_suptitle()
    panels = [ax for ax in fig.axes if ax.axison]
    assert panels and all(ax.get_xlabel() == "measured (ms)" and ax.get_ylabel() == "fitted (ms)"
                          for ax in panels)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_the_same_figure_gives_the_same_bytes(fmt):
    """SVG ids are salted at random and PDFs dated unless psdsim fixes both."""
    from psdsim.sim.output.plots import figure_bytes
    from psdsim.studies.sweep_figures import heatmap_k_m_figure

    first, second = (figure_bytes(heatmap_k_m_figure(sweep_rows(), SWEPT, "throughput_tok_s"), fmt)
                     for _ in range(2))
    assert first == second and b"psdsim" in first


def test_heatmap_cells_write_large_values_in_full():
    rows = [dict(r, latency_ms_p99=10 * r["throughput_tok_s"]) for r in sweep_rows() if r["method"] == "psd"]
    fig = heatmap_k_m_figure(rows, ["k", "m"], "latency_ms_p99")
    cells = [text.get_text() for text in fig.axes[0].texts]
    assert "4,247" in cells and not any("e+" in cell for cell in cells)
    assert fig.axes[0].get_title() == "" and "(ms)" in fig.axes[1].get_ylabel()
