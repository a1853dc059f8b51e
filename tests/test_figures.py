"""Properties of psdsim's figures that a reader relies on: legends that name what the data is and
cover none of it, one colour scale where panels compare one metric, units on axes and bars."""

from __future__ import annotations

from typing import Any

import matplotlib
import pytest
from psdsim.sim.output.plots import occupancy_figure, occupancy_png
from psdsim.sim.run import simulate

from tests.conftest import small

matplotlib.use("Agg")


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


@pytest.fixture(scope="module")
def psd_result() -> Any:
    return simulate(small(method="psd", requests=60))


def test_occupancy_legends_name_the_sub_batches(psd_result):
    texts = legend_texts(occupancy_figure(psd_result))
    assert {"sub-batch 0", "sub-batch 1"} <= set(texts)
    assert not any(word in text for text in texts for word in ("False", "True"))


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
