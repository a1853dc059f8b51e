"""`psdsim sweep`: designs, validation, failures, resuming after kill -9, and executors agreeing."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.errors import ScenarioError
from psdsim.studies import sweep as sweep_module
from psdsim.studies.executors import ray_available
from psdsim.studies.sweep import run_sweep
from psdsim.studies.sweep_design import load_design, unit_design
from tests.helpers import paths
from tests.helpers.cli import SMALL, spec

ROOT = paths.ROOT


def table(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))


# ---------------------------------------------------------------------------------------------
# Designs


def test_grid_is_the_product_in_spec_order_last_field_fastest(tmp_path):
    d = load_design(spec(tmp_path, '[grid]\nmethod = ["sd", "psd"]\nk = [2, 3, 4]\n'))
    assert d.swept == ["method", "k"]
    assert [(p.inputs["method"], p.inputs["k"]) for p in d.points] == [
        ("sd", 2), ("sd", 3), ("sd", 4), ("psd", 2), ("psd", 3), ("psd", 4)]
    assert [(p.scenario.method, p.scenario.k, p.scenario.requests) for p in d.points][1] == ("sd", 3, 20)
    assert len({p.run_id for p in d.points}) == 6
    assert load_design(d.path).digest == d.digest  # stable


def test_sections_optional_fields_and_no_grid(tmp_path):
    d = load_design(spec(tmp_path, '[grid.workload]\nrate = ["none", 2.0]\n[grid.run]\nk = [2]\n'))
    assert [p.scenario.rate for p in d.points] == [None, 2.0]
    one = load_design(spec(tmp_path, "", name="one.toml"))
    assert len(one.points) == 1 and one.points[0].scenario.name == "one"


SAMPLE = ('[sample]\nmethod = "{method}"\nn = {n}\nseed = {seed}\nrate = [0.5, 8.0]\nlog = ["rate"]\n'
          'acceptance = [0.3, 0.8]\nk = [1, 10]\ndataset = ["sharegpt", "arena"]\n'
          'm = {{ choices = [2, 4] }}\n')


@pytest.mark.parametrize("method", ["random", "lhs"])
def test_sample_designs_are_seeded_and_in_range(tmp_path, method):
    def draw(seed: int, n: int = 12) -> list[dict]:
        path = spec(tmp_path, SAMPLE.format(method=method, n=n, seed=seed), name=f"s{seed}.toml")
        return [p.inputs for p in load_design(path).points]

    a = draw(3)
    assert len(a) == 12 and a == draw(3) and a != draw(4)
    for x in a:
        assert 0.5 <= x["rate"] <= 8.0 and 0.3 <= x["acceptance"] <= 0.8
        assert isinstance(x["k"], int) and 1 <= x["k"] <= 10
        assert x["dataset"] in ("sharegpt", "arena") and x["m"] in (2, 4)


def test_latin_hypercube_hits_every_stratum_once(tmp_path):
    n = 10
    u = unit_design("lhs", n, 3, np.random.default_rng(0))
    for j in range(3):
        assert sorted(np.floor(u[:, j] * n).astype(int)) == list(range(n))
    d = load_design(spec(tmp_path, SAMPLE.format(method="lhs", n=n, seed=7)))
    xs = [p.inputs for p in d.points]
    strata = {
        "acceptance": [math.floor((x["acceptance"] - 0.3) / 0.5 * n) for x in xs],
        "rate": [math.floor(math.log(x["rate"] / 0.5) / math.log(16.0) * n) for x in xs],  # log strata
        "k": [x["k"] - 1 for x in xs],  # 10 integers, 10 strata: each value exactly once
    }
    for name, hits in strata.items():
        assert sorted(hits) == list(range(n)), name
    assert sorted(x["dataset"] for x in xs) == ["arena"] * 5 + ["sharegpt"] * 5
    # i.i.d. sampling has no such guarantee (and, with this seed, misses strata)
    iid = load_design(spec(tmp_path, SAMPLE.format(method="random", n=n, seed=7), name="r.toml"))
    assert sorted(p.inputs["k"] for p in iid.points) != list(range(1, n + 1))


def test_grid_times_sample(tmp_path):
    d = load_design(spec(tmp_path, '[grid]\nmethod = ["sd", "psd"]\n'
                                   '[sample]\nmethod = "lhs"\nn = 3\nrate = [1.0, 4.0]\n'))
    assert len(d.points) == 6 and d.swept == ["method", "rate"]
    rates = [p.inputs["rate"] for p in d.points]
    assert rates[:3] == rates[3:]  # every grid point at the same samples


def test_paths_resolve_relative_to_the_spec(tmp_path):
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "base.toml").write_text("[run]\nk = 5\n[workload]\nrequests = 20\noutput_len = 16\n")
    (sub / "t.jsonl").write_text("".join(json.dumps({"arrival_s": i * 0.1, "prompt_tokens": 32,
                                                     "output_tokens": 8}) + "\n" for i in range(5)))
    d = load_design(spec(sub, '[grid]\ntrace = ["t.jsonl"]\nm = [2, 4]\n',
                         base='[base]\nscenario = "base.toml"\n'))
    s = d.points[0].scenario
    assert s.k == 5 and s.trace == str((sub / "t.jsonl").resolve()) and s.name == "base"


# ---------------------------------------------------------------------------------------------
# Validation: one line, exit 2, nothing written


BAD = [
    ("[gird]\nk = [2]\n", "[gird]", "did you mean [grid]"),
    ("[grid]\nkk = [2, 3]\n", "grid.kk", "did you mean 'k'"),
    ("[grid]\nk = 3\n", "grid.k", "non-empty list"),
    ('[grid]\nk = ["x"]\n', "grid.k", "must be an integer"),
    ("[grid]\nk = [2, 40]\n", "k: must be between 1 and 32, got 40 at design point 2 of 2 (k=40)", "fix:"),
    ('[grid]\nmethod = ["sd", "psdd"]\n', "method: unknown method 'psdd' at design point 2", "use one of"),
    ("[grid.run]\nrate = [1.0]\n", "grid.run.rate", "belongs in [workload]"),
    ("[sample]\nrate = [1.0, 2.0]\n", "sample.n", "n = 16"),
    ('[sample]\nmethod = "sobol"\nn = 4\nrate = [1.0, 2.0]\n', "sample.method", "random, lhs"),
    ('[sample]\nn = 4\nlog = ["dataset"]\ndataset = ["arena", "tough"]\n', "sample.dataset", "log applies"),
    ("[sample]\nn = 4\nk = [1.5, 4]\n", "sample.k", "must be integers"),
    ("[sample]\nn = 4\nrate = [0.0, 4.0]\nlog = [\"rate\"]\n", "sample.rate", "lo > 0"),
    ("[grid]\nk = [2]\n[sample]\nn = 2\nk = [1, 3]\n", "sample.k", "also in [grid]"),
    ("[sample]\nn = 2\nbogus = [1, 3]\n", "sample.bogus", "unknown key"),
    ('[grid]\nrequests = [10]\n[base.run]\npreset = "x"\n', "base.run.preset", "unknown key"),
    ("[base.run]\nm = 8\n", "base.m", "given twice in spec.toml, in [base] and in [base.run]"),
    ("[grid]\nk = [2]\n[grid.run]\nk = [3]\n", "grid.k", "keep one k (in [grid.run] or in [grid]"),
    ("[sample]\nn = 2\nsed = 3\n", "sample.sed", "did you mean 'seed'?"),
    ("[sample]\nn = 2\nzzz = 3\n", "sample.zzz", "[sample] also takes method, n, seed, log"),
]


@pytest.mark.parametrize(("body", "where", "fix"), BAD)
def test_bad_specs_are_one_line_errors(tmp_path, body, where, fix):
    with pytest.raises(ScenarioError) as err:
        load_design(spec(tmp_path, body))
    message = str(err.value)
    assert "\n" not in message and where in message and fix in message and "fix:" in message


def test_bad_spec_from_the_cli_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(spec(tmp_path, "[grid]\nk = [2, 3, 99]\n")), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: k:") and "design point 3 of 3" in err and "\n" not in err
    assert not out.exists()
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", str(out)]) == 2
    assert not out.exists()
    base = spec(tmp_path, '[base]\npreset = "nope"\n', base="", name="p.toml")
    assert main(["sweep", str(base), "--out", str(out)]) == 2 and not out.exists()


def test_ray_executor_without_ray_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    out = tmp_path / "out"
    assert main(["sweep", str(spec(tmp_path, "[grid]\nk = [2]\n")), "--out", str(out),
                 "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'psdsim[ray]'" in err and "\n" not in err and not out.exists()


# ---------------------------------------------------------------------------------------------
# Running


def test_failing_runs_are_recorded_and_not_fatal(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    path = spec(tmp_path, '[grid]\ngpu_memory_utilization = [0.65, 0.1]\nprofile = ["", "bad.json"]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "3 of 4 runs failed" in captured.err
    rows = table(out)
    assert [r["status"] for r in rows] == ["ok", "error", "infeasible", "infeasible"]
    assert "profile" in rows[1]["error"] and "\n" not in rows[1]["error"]
    assert "does not fit" in rows[2]["error"] or "needs" in rows[2]["error"]
    assert rows[0]["throughput_tok_s"] and not rows[1]["throughput_tok_s"]
    # all failing: exit 1, the table still written
    path = spec(tmp_path, '[grid]\nprofile = ["bad.json"]\n', name="all.toml")
    assert main(["sweep", str(path), "--out", str(tmp_path / "all"), "--workers", "1"]) == 1
    assert table(tmp_path / "all")[0]["status"] == "error"


def test_an_exception_inside_simulate_becomes_the_rows_error(tmp_path, monkeypatch):
    real = sweep_module.simulate

    def flaky(s):
        if s.k == 3:
            raise RuntimeError("boom\nsecond line")
        return real(s)

    monkeypatch.setattr(sweep_module, "simulate", flaky)
    report, rows = run_sweep(load_design(spec(tmp_path, "[grid]\nk = [2, 3, 4]\n")), tmp_path / "o")
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"].startswith("RuntimeError: boom second line [test_sweep.py:")
    assert report.counts == {"ok": 2, "error": 1, "infeasible": 0}


def test_retry_errors_runs_the_errors_again(tmp_path, monkeypatch):
    real = sweep_module.simulate
    monkeypatch.setattr(sweep_module, "simulate", lambda s: (_ for _ in ()).throw(OSError("disk")) if s.k == 3
                        else real(s))
    design = load_design(spec(tmp_path, "[grid]\nk = [2, 3]\n"))
    assert [r["status"] for r in run_sweep(design, tmp_path / "o")[1]] == ["ok", "error"]
    monkeypatch.setattr(sweep_module, "simulate", real)
    assert run_sweep(design, tmp_path / "o")[0].ran == 0  # errors are results too
    report, rows = run_sweep(design, tmp_path / "o", retry_errors=True)
    assert report.ran == 1 and [r["status"] for r in rows] == ["ok", "ok"]


def test_base_may_be_a_file_name(tmp_path):
    (tmp_path / "b.toml").write_text("requests = 20\noutput_len = 16\nk = 4\n")
    d = load_design(spec(tmp_path, 'base = "b.toml"\n[grid]\nm = [2, 4]\n', base=""))
    assert [(p.scenario.k, p.scenario.m, p.scenario.requests) for p in d.points] == [(4, 2, 20), (4, 4, 20)]


def test_duplicate_points_run_once(tmp_path):
    d = load_design(spec(tmp_path, '[grid]\nk = [2, 3, 2]\nmethod = ["psd", "psd"]\n'))
    assert len(d.points) == 6 and len(d.runs) == 2
    report, rows = run_sweep(d, tmp_path / "o")
    assert report.ran == 2 and len(rows) == 2 and len(run_files(tmp_path / "o")) == 2


def test_columns_inputs_metrics_and_parquet(tmp_path):
    out = tmp_path / "o"
    assert main(["sweep", str(spec(tmp_path, '[grid]\nmethod = ["ar", "psd"]\n')), "--out", str(out),
                 "--workers", "1", "--no-figures"]) == 0
    rows = table(out)
    header = list(rows[0])
    assert header[:4] == ["run_id", "status", "error", "method"]
    for col in ("requests", "gpu", "seed", "latency_ms_p99", "ttft_ms_mean", "kv_pool_blocks_verifier",
                "summary_k", "warnings", "throughput_tok_s"):
        assert col in header, col
    assert rows[0]["summary_k"] == "" and rows[0]["k"] == "3"  # AR has no k; the input stays
    assert not any("wall" in c for c in header)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert not (out / "results.parquet").exists()
        return
    t = pq.read_table(out / "results.parquet")
    assert t.num_rows == 2 and t.column_names == header


def test_resume_reuses_finished_runs_and_refuses_another_spec(tmp_path, capsys):
    path = spec(tmp_path, "[grid]\nk = [2, 3, 4]\n")
    out = tmp_path / "o"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "--json"]) == 0
    first = (out / "results.csv").read_text()
    assert json.loads(capsys.readouterr().out)["ran"] == 3
    victim = out / "runs" / run_files(out)[0]
    victim.unlink()
    (out / "runs" / f".{victim.name}.tmp123").write_text("{half")  # no mark: not taken for psdsim's
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ran"], doc["reused"]) == (1, 2)
    assert (out / "results.csv").read_text() == first
    assert run_files(out) == sorted(f"{r['run_id']}.json" for r in table(out))
    assert (out / "runs" / f".{victim.name}.tmp123").read_text() == "{half"   # left as it was
    path.write_text(SMALL + "[grid]\nk = [2, 3, 4, 5]\n")  # the spec edited: another design
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a different sweep" in err and "--force" in err and "\n" not in err.strip()
    assert main(["sweep", str(path), "--out", str(out), "--force", "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ran"] == 1  # unchanged scenarios are kept
    other = spec(tmp_path, "[grid]\nk = [2, 3, 4, 5]\n", name="other.toml")  # another name: new runs
    assert main(["sweep", str(other), "--out", str(out), "--force", "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ran"] == 4
    assert len(run_files(out)) == 4
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    assert main(["sweep", str(path), "--out", str(tmp_path / "junk")]) == 2


def run_files(out: Path) -> list[str]:
    """The run files in a sweep folder, without the records psdsim keeps beside them."""
    return sorted(p.name for p in (out / "runs").iterdir() if not p.name.startswith("."))


def _sweep_cmd(path: Path, out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "psdsim", "sweep", str(path), "--out", str(out),
            "--workers", str(workers), "--no-figures", "--json"]


KILL_SPEC = ("[base]\nrequests = 30\noutput_len = 32\nprompt_len = 64\n"
             '[grid]\nmethod = ["sd", "psd"]\nk = [1, 2, 3, 4, 5, 6]\nm = [2, 3, 4, 6, 8]\n')


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    path = spec(tmp, "", base=KILL_SPEC, name="kill.toml")
    report, _ = run_sweep(load_design(path), tmp / "ref", workers=2)
    assert report.runs == 60
    return path, (tmp / "ref" / "results.csv").read_text()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_mid_sweep_then_resume_loses_nothing(tmp_path, uninterrupted, workers):
    path, reference = uninterrupted
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_sweep_cmd(path, out, workers), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    runs = out / "runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if runs.is_dir() and sum(1 for p in runs.iterdir() if not p.name.startswith(".")) >= 5:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # kill -9 the sweep only, not its pool
    proc.wait()
    for _ in range(100):  # the pool's workers notice their parent is gone and exit
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("pool workers outlived their killed parent")
    kept = sum(1 for p in runs.iterdir() if not p.name.startswith("."))
    assert 5 <= kept < 60 and not (out / "results.csv").exists()
    done = subprocess.run(_sweep_cmd(path, out, workers), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["reused"], doc["ran"], doc["ok"]) == (kept, 60 - kept, 60)
    assert (out / "results.csv").read_text() == reference
    ids = [r["run_id"] for r in table(out)]
    assert len(ids) == len(set(ids)) == 60 == len(run_files(out))


def test_local_pool_gives_the_serial_table(tmp_path):
    path = spec(tmp_path, '[grid]\nmethod = ["sd", "psd"]\nk = [2, 3]\n[sample]\nn = 3\nrate = [1.0, 8.0]\n')
    tables = []
    for workers in (1, 2):
        assert main(["sweep", str(path), "--out", str(tmp_path / f"w{workers}"), "--workers", str(workers),
                     "--no-figures"]) == 0
        tables.append((tmp_path / f"w{workers}" / "results.csv").read_text())
    assert tables[0] == tables[1] and len(tables[0].splitlines()) == 13


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'psdsim[ray]')")
def test_ray_gives_the_local_table(tmp_path):
    path = spec(tmp_path, '[grid]\nmethod = ["sd", "psd"]\nk = [2, 3]\n'
                          'gpu_memory_utilization = [0.65, 0.1]\n')
    assert main(["sweep", str(path), "--out", str(tmp_path / "local"), "--workers", "2", "--no-figures"]) == 0
    assert main(["sweep", str(path), "--out", str(tmp_path / "ray"), "--workers", "2", "--no-figures",
                 "--executor", "ray"]) == 0
    local = (tmp_path / "local" / "results.csv").read_text()
    assert (tmp_path / "ray" / "results.csv").read_text() == local
    assert "infeasible" in local


def test_figures_and_text_summary(tmp_path, capsys):
    path = spec(tmp_path, '[grid]\nmethod = ["sd", "psd"]\nrate = [2.0, 8.0]\nk = [2, 3]\nm = [2, 4]\n')
    out = tmp_path / "o"
    assert main(["sweep", str(path), "--out", str(out), "--metric", "vsr"]) == 0
    text = capsys.readouterr().out
    assert "16 runs over method, rate, k, m" in text and "ok 16" in text and str(out / "results.csv") in text
    names = {p.name for p in (out / "figures").iterdir() if not p.name.startswith(".")}   # not records
    assert names == {"throughput_vs_rate.png", "throughput_vs_rate.svg", "heatmap_vsr_k_m.png",
                     "heatmap_vsr_k_m.svg"}
    state = json.loads((out / "sweep.json").read_text())
    assert state["state"] == "done" and state["runs"] == 16 and "wall_s" in state


def test_dry_run_validates_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    path = spec(tmp_path, "[grid]\nk = [2, 3]\nseed = [0, 1, 0]\n")
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["points"], doc["runs"]) == (6, 4) and not out.exists()


def test_example_spec_is_valid():
    d = load_design(ROOT / "examples" / "sweep.toml")
    assert len(d.runs) >= 8 and {"method", "rate"} <= set(d.swept)


MILLION = ("[grid]\nk = [1, 2, 3, 4, 5, 6, 7, 8, 9, {last_k}]\n"
           "m = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]\n"
           "rate = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]\n"
           "seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
           "output_len = [16, 32, 48, 64, 80, 96, 112, 128, 144, 160]\n"
           "extra = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n")


def _counting_builds(monkeypatch) -> list[int]:
    from psdsim.studies import sweep_design

    built = [0]
    build = sweep_design.scenario_from_mapping

    def counted(*args, **kwargs):
        built[0] += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(sweep_design, "scenario_from_mapping", counted)
    return built


def test_a_bad_value_on_any_axis_is_found_before_the_grid_is_expanded(tmp_path, monkeypatch):
    """k = 99 is the first axis's last value, design point 900,001 of 10^6: found after checking
    each grid value once (61 scenarios), named with its point, not after 900,001 of them."""
    built = _counting_builds(monkeypatch)
    with pytest.raises(ScenarioError) as err:
        load_design(spec(tmp_path, MILLION.format(last_k=99)))
    assert built[0] <= 61
    assert "got 99 at design point 900001 of 1000000 (k=99, m=1, rate=0.5" in str(err.value)


def test_dry_run_counts_a_million_points_without_building_them(tmp_path, capsys, monkeypatch):
    built = _counting_builds(monkeypatch)
    path = spec(tmp_path, MILLION.format(last_k=10))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["points"], doc["runs"], doc["checked"]) == (10**6, 10**6, "grid values")
    assert built[0] <= 61 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("body", [
    "[grid]\nk = [2, 3, 2]\nmethod = [\"psd\", \"psd\"]\n",
    "[grid]\nrate = [\"none\", 2.0, 2]\n",
    "[grid]\nk = [2, 3]\n[sample]\nmethod = \"random\"\nn = 6\nseed = 1\nm = { choices = [2, 4] }\n",
    "[sample]\nmethod = \"lhs\"\nn = 5\nrate = [0.5, 4.0]\nk = [2, 4]\n",
    "",
])
def test_counted_size_and_runs_match_the_expansion(tmp_path, body):
    d = load_design(spec(tmp_path, body))
    assert (d.size, d.distinct) == (len(d.points), len(d.runs))


def test_a_long_sweep_says_its_estimate_then_its_progress_off_a_terminal(tmp_path, capsys, monkeypatch):
    """Thresholds lowered so two small runs count as long; the estimate comes once, first."""
    from psdsim.commands import common

    monkeypatch.setattr(common, "LONG_WORK_S", 0.0)
    monkeypatch.setattr(common, "PROGRESS_AFTER_S", 0.0)
    path = spec(tmp_path, "[grid]\nk = [2, 3]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1", "--no-figures"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("psdsim: 2 runs: about ") and sum("of simulation" in e for e in err) == 1
    assert err[1:] and all(e.startswith("  sweep: ") and " runs, 0 failed, " in e for e in err[1:])
    assert err[-1].startswith("  sweep: 100% 2/2 runs, 0 failed, ")
