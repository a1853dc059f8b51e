"""The catalog: every entry sourced, derived model quantities matching published configs."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog

CAT = builtin_catalog()

# Published totals (reference hardware_models_workloads.md §2.2, from the model cards).
PUBLISHED = {
    "qwen3-0.6b": (0.596e9, 114_688),
    "qwen3-1.7b": (1.721e9, 114_688),
    "qwen3-4b": (4.022e9, 147_456),
    "qwen3-8b": (8.191e9, 147_456),
    "qwen3-32b": (32.762e9, 262_144),
    "llama-3.1-8b": (8.030e9, 131_072),
    "llama-3.3-70b": (70.554e9, 327_680),
}


def test_every_entry_names_a_source():
    groups = [CAT.gpus, CAT.links, CAT.models, CAT.datasets, CAT.acceptance]
    for group in groups:
        assert group
        for entry in group.values():
            assert len(entry.source.strip()) > 20


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_parameter_counts_and_kv_bytes_match_published(key):
    model = CAT.models[key]
    params, kv = PUBLISHED[key]
    assert model.total_params == pytest.approx(params, rel=0.01)
    assert model.kv_bytes_per_token == kv


def test_issue_catalog_is_complete():
    assert {"l40s", "h100-sxm", "h200", "a100-80g"} <= CAT.gpus.keys()
    assert {"pcie4", "pcie5", "nvlink3", "nvlink4"} <= CAT.links.keys()
    assert set(PUBLISHED) <= CAT.models.keys()
    assert {"sharegpt", "arena", "spec-bench", "tough"} <= CAT.datasets.keys()


def test_kv_heads_replicate_when_fewer_than_tp_ranks():
    model = CAT.models["qwen3-32b"]  # 8 KV heads
    assert model.kv_bytes_per_token_per_gpu(4) == model.kv_bytes_per_token / 4
    assert model.kv_bytes_per_token_per_gpu(16) == model.kv_bytes_per_token / 8
