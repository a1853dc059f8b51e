"""A standing corpus of malformed input over every command: each one must end with
exit code 2, exactly one line on stderr starting `psdsim: error:`, no traceback, and nothing
written or deleted in the working directory. Cases name the files they need from FILES (made
fresh in a temporary working directory); hypothesis adds scenario files and request traces."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.cli import main
from psdsim.sim.scenario import FIELDS

RANDOM = bytes(range(256)) * 4 + b"\xff\xfe\x00garbage"   # not UTF-8, not JSON, not SQLite
DEEP = b"[" * 5000 + b"]" * 5000   # deeper than tomllib and json can recurse
FILES: dict[str, bytes | None] = {   # None: a folder
    "random.csv": RANDOM, "random.toml": RANDOM, "random.jsonl": RANDOM, "random.json": RANDOM,
    "folder": None,
    "huge.csv": b"arrival_s,prompt_tokens,output_tokens\n0,100000,10\n",
    "badrow.csv": b"arrival_s,prompt_tokens,output_tokens\n0,abc,10\n",
    "noheader.csv": b"0,100,10\n",
    "twice.toml": b"k = 3\n[run]\nk = 4\n",
    "typo.toml": b"reqests = 5\n",
    # integers past a float's range where a float is wanted (TOML reads integers of any length)
    "digits_rate.toml": b"rate = 1" + b"0" * 400 + b"\n",
    "sweep_digits.toml": b"[grid]\nrate = [1" + b"0" * 400 + b"]\n",
    "cat_digits.toml": (b'[gpus.big]\nname = "B"\nmemory_gb = 1' + b"0" * 400
                        + b'\nmemory_bandwidth_gbps = 864.0\nbf16_tflops = 181.0\nnvlink = false\n'
                        b'host_link = "pcie4"\nsource = "x"\n'),
    "list.json": b"[1, 2, 3]\n",
    "existing.txt": b"a user's file\n",
    "nothing_fits.toml": (b"[base]\nrequests = 10\noutput_len = 8\ngpu_memory_utilization = 0.1\n"
                          b"[space]\nmethod = [\"sd\", \"psd\"]\n[slo]\nlatency_p99_ms = 60000\n"),
    "sweep_bad.toml": b"[grid]\nkk = [1, 2]\n",
    "sweep_empty.toml": b"[grid]\nk = []\n", "sweep_text.toml": b'[grid]\nmethod = "sd"\n',
    "space_invalid.toml": b"[base]\nrequests = 10\n[space]\nk = [0, 40]\n[slo]\nlatency_p99_ms = 1000\n",
    # catalog files a scenario names: tables of the wrong shape, numbers the model cannot use
    "cat_scalar.toml": b"gpus = 3\n",
    "cat_entry_scalar.toml": b'[gpus]\nl40s = "fast"\n',
    "cat_prior_scalar.toml": b'[acceptance]\n"qwen3-1.7b -> qwen3-32b" = 0.6\n',
    "cat_zero_link.toml": (b'[links.slow]\nname = "L"\nnvlink = false\np2p_latency_us = 10.0\n'
                           b'p2p_bandwidth_gbps = 0.0\nallreduce_latency_us = 30.0\n'
                           b'allreduce_busbw_gbps = 20.0\nsource = "x"\n'),
    "cat_slow_link.toml": (b'[links.slow]\nname = "L"\nnvlink = false\np2p_latency_us = 10.0\n'
                           b'p2p_bandwidth_gbps = 1e-300\nallreduce_latency_us = 30.0\n'
                           b'allreduce_busbw_gbps = 20.0\nsource = "x"\n'),
    "cat_huge_gpu.toml": (b'[gpus.big]\nname = "B"\nmemory_gb = 1e300\nmemory_bandwidth_gbps = 864.0\n'
                          b'bf16_tflops = 181.0\nnvlink = false\nhost_link = "pcie4"\nsource = "x"\n'),
    "cat_zero_weight.toml": (b'[datasets.mine]\nmax_requests = 0\nmin_prompt = 16\nmax_prompt = 512\n'
                             b'components = [{ weight = 0.0, mu = 5.0, sigma = 0.5 }]\nsource = "x"\n'),
    "cat_nan_mu.toml": (b'[datasets.mine]\nmax_requests = 0\nmin_prompt = 16\nmax_prompt = 512\n'
                        b'components = [{ weight = 1.0, mu = nan, sigma = 0.5 }]\nsource = "x"\n'),
    # plan and sweep specs with tables of the wrong shape, values that are no numbers
    "plan_base_scalar.toml": b"base = 3\n[slo]\nlatency_p99_ms = 60000\n",
    "plan_price_nan.toml": (b"[base]\nrequests = 8\n[space]\nk = [2]\n[slo]\nlatency_p99_ms = 60000\n"
                            b"[price]\nl40s = nan\n"),
    "plan_price_typo.toml": (b"[base]\nrequests = 8\n[space]\nk = [2]\n[slo]\nlatency_p99_ms = 60000\n"
                             b"[price]\nh100 = 2.5\n"),
    "plan_slo_nan.toml": b"[base]\nrequests = 8\n[space]\nk = [2]\n[slo]\nlatency_p99_ms = nan\n",
    "plan_rate_inf.toml": (b"[base]\nrequests = 8\n[space]\nk = [2]\n[slo]\nlatency_p99_ms = 60000\n"
                           b"[search]\nrate_max = inf\n"),
    "plan_too_big.toml": (b"[base]\nrequests = 8\n[space]\nrequests = [100000000]\n[slo]\n"
                          b"latency_p99_ms = 60000\n"),
    "plan_huge_space.toml": (b"[base]\nrequests = 8\n[space]\nk = " + str(list(range(1, 101))).encode()
                             + b"\nm = " + str(list(range(1, 101))).encode() + b"\nseed = "
                             + str(list(range(101))).encode() + b"\n[slo]\nlatency_p99_ms = 60000\n"),
    "plan_text_number.toml": b'[base]\nrequests = 8\n[space]\nk = ["2"]\n[slo]\nlatency_p99_ms = 60000\n',
    "sweep_huge_sample.toml": b"[base]\nrequests = 8\n[sample]\nn = 1000000000\nk = { range = [1, 8] }\n",
    "sweep_preset_list.toml": b'[base]\npreset = ["setting2"]\n[grid]\nk = [2]\n',
    "sweep_log_text.toml": (b'[base]\nrequests = 8\n[sample]\nn = 2\n'
                            b'rate = { range = [1.0, 8.0], log = "false" }\n'),
    # nesting deeper than Python's parsers recurse, in each reader of a user's file
    "deep.toml": b"[run]\nk = " + DEEP + b"\n", "deep_sweep.toml": b"[grid]\nk = " + DEEP + b"\n",
    "deep_catalog.toml": b"[gpus]\nx = " + DEEP + b"\n", "deep.json": DEEP,
    "deep.jsonl": b'{"arrival_s": ' + DEEP + b"}\n", "deep_run/manifest.toml": b"k = " + DEEP + b"\n",
    "fullwidth.csv": "arrival_s,prompt_tokens,output_tokens\n0,１6,8\n".encode(),
    # values past a float's range, a column or key given twice
    "digits400.jsonl": b'{"arrival_s": 0, "prompt_tokens": 1' + b"0" * 400 + b', "output_tokens": 4}\n',
    "twice_column.csv": b"arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,10,4,20\n",
    "twice_key.jsonl": b'{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 4, "output_tokens": 8}\n',
    "twice_config/config.json": (b'{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", '
                                 b'"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, '
                                 b'"num_hidden_layers": 2, "num_attention_heads": 16, '
                                 b'"num_key_value_heads": 8, '
                                 b'"head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": true, '
                                 b'"max_position_embeddings": 40960, "torch_dtype": "bfloat16"}\n'),
    "twice_bench.json": (b'{"model_id": "Qwen/Qwen3-32B", "duration": 3.0, "duration": 0.01, '
                         b'"input_lens": [100, 200], "output_lens": [16, 16], "ttfts": [0.3, 0.35], '
                         b'"latencies": [1.5, 1.6], "start_times": [0.0, 0.1]}\n'),
    "cat_head_dim0.toml": (b'[models.big]\nhf_id = "x/y"\nlayers = 64\nhidden = 5120\nintermediate = 25600\n'
                           b'heads = 64\nkv_heads = 8\nhead_dim = 0\nvocab = 151936\ntie_embeddings = false\n'
                           b'qk_norm = true\nbytes_per_param = 2.0\nsource = "t"\n'),
    "cat_far_prompts.toml": (b'[datasets.dd]\nmax_requests = 0\nmin_prompt = 256\nmax_prompt = 300\n'
                             b'components = [{ weight = 1.0, mu = 20.0, sigma = 0.01 }]\nsource = "t"\n'),
    "not_utf8_\udcff.csv": b"arrival_s,prompt_tokens,output_tokens\n0,10,4\n",   # a name with byte 0xff
    **{f"nul_{field}.toml": f'{field} = "./x\\u0000y"\n'.encode()
       for field in ("profile", "trace", "catalog", "target")},
}
# files that name the loop of links below, each relative to its own folder
FILES.update({"sweep_loop.toml": b'[base]\nprofile = "loop1"\n[grid]\nk = [2, 3]\n',
              "plan_loop.toml": (b'[base]\nrequests = 8\n[space]\nprofile = ["loop1"]\n'
                                 b'[slo]\nlatency_p99_ms = 1\n'),
              "loop_run/manifest.toml": b'profile = "../loop1"\n'})
LINKS = {"loop1": "loop2", "loop2": "loop1"}   # a loop of symbolic links
PIPE = "pipe"   # a named pipe: reading it would wait forever
# Paths the system cannot follow, and a pipe: (the field the line names, why, the command line)
LOOP, NUL, NOT_REGULAR = "a loop of symbolic links", "the name holds a NUL byte", "is not a regular file"
UNFOLLOWABLE = [
    ("profile", LOOP, ["run", "--no-write", "--set", "profile=loop1"]),
    ("trace", LOOP, ["run", "--no-write", "--set", "trace=loop1"]),
    ("catalog", LOOP, ["run", "--no-write", "--set", "catalog=loop1"]),
    ("target", LOOP, ["run", "--no-write", "--set", "target=./loop1"]),
    ("loop1", LOOP, ["calibrate", "loop1", "--out", "p.json"]),
    ("--traces", LOOP, ["validate", "--traces", "loop1"]),
    ("profile", LOOP, ["theory", "--tail", "--set", "profile=loop1"]),
    ("catalog", LOOP, ["compare", "--set", "catalog=loop1"]),
    ("catalog", LOOP, ["catalog", "--catalog", "loop1"]),
    ("scenario", LOOP, ["run", "loop1"]),
    ("base.profile", LOOP, ["sweep", "sweep_loop.toml"]), ("space.profile", LOOP, ["plan", "plan_loop.toml"]),
    ("loop_run/manifest.toml: profile", LOOP, ["validate", "--traces", "loop_run"]),
    *((field, NUL, ["run", "--no-write", f"nul_{field}.toml"])
      for field in ("profile", "trace", "catalog", "target")),
    ("profile", NOT_REGULAR, ["run", "--no-write", "--profile", PIPE]),
    ("trace", NOT_REGULAR, ["run", "--no-write", "--set", f"trace={PIPE}"]),
    ("catalog", NOT_REGULAR, ["run", "--no-write", "--set", f"catalog={PIPE}"]),
    (PIPE, NOT_REGULAR, ["calibrate", PIPE]),
]
DEEP_CASES = [["run", "deep.toml"], ["sweep", "deep_sweep.toml"], ["plan", "deep.toml"],
              ["catalog", "--catalog", "deep_catalog.toml"], ["validate", "--traces", "deep_run"],
              ["run", "--no-write", "--set", "trace=deep.jsonl"],
              ["run", "--no-write", "--profile", "deep.json"],
              ["calibrate", "deep.json"], ["scenario", "deep.toml"]]
# Python's int() and float() read '３' as 3: no number a user types may be taken that way. Each
# line must name the field with the digit (some of these files are refused for more than that).
WIDE_DIGITS = [("k", ["run", "--no-write", "--set", "k=３"]),
               ("acceptance", ["run", "--no-write", "--set", "acceptance=０.5"]),
               ("trace", ["run", "--no-write", "--set", "trace=fullwidth.csv"]),
               ("--alpha", ["theory", "--alpha", "１"]), ("--k-max", ["theory", "--k-max", "３"]),
               ("--ks", ["theory", "--bridge", "--ks", "１-3"]),
               ("--workers", ["plan", "nothing_fits.toml", "--workers", "２"]),
               ("--workers", ["sweep", "typo.toml", "--workers", "２"]),
               ("--repeats", ["paper", "--repeats", "２"]),
               ("--tp", ["calibrate", "random.json", "--tp", "２"]),
               ("--requests", ["validate", "--requests", "３"]), ("--k", ["validate", "--k", "１,3"]),
               ("--max-error", ["validate", "--traces", "folder", "--max-error", "p50=５"]),
               ("--k", ["engine", "run", "--k", "３"]),
               ("engine.k", ["engine", "run", "--set", "engine.k=３"])]
LONG = "a" * 300   # a name the system refuses (ENAMETOOLONG) where a path is first looked at
LONG_NAME_CASES = [["run", "--no-write", "--set", f"catalog={LONG}"],
                   ["run", "--no-write", "--set", f"trace={LONG}"],
                   ["run", "--no-write", "--set", f"profile={LONG}"],
                   ["run", "--no-write", "--profile", LONG],
                   ["validate", "--traces", LONG], ["validate", "--engine", "vllm", "--models-dir", LONG],
                   ["catalog", "--catalog", LONG], ["theory", "--plot", LONG]]
FAST = ["--set", "requests=8", "--set", "output_len=8", "--set", "prompt_len=16", "--set", "m=4"]

CASES = [
    # run: resource limits, traces, names, fields, files
    ["run", "--set", "requests=1000000000"],
    ["run", "--set", "requests=100000000", "--no-write"],
    *[["run", "--no-write", "--set", f"trace={name}"]
      for name in ("random.csv", "random.toml", "random.jsonl", "folder", "huge.csv", "badrow.csv",
                   "noheader.csv", "missing.csv", "digits400.jsonl", "twice_column.csv",
                   "twice_key.jsonl")],
    ["run", *FAST, "--set", "trace=not_utf8_\udcff.csv"],   # scenario.toml could not record it
    ["run", "--no-write", *FAST, "--set", "draft=twice_config/config.json", "--set", "acceptance=0.6"],
    ["validate", "--bench", "twice_bench.json", "--set", "method=ar", "--set", "target=qwen3-32b"],
    ["run", "--no-write", *FAST, "--set", "catalog=cat_head_dim0.toml", "--set", "target=big"],
    ["catalog", "--catalog", "cat_head_dim0.toml"],
    ["run", *FAST[:2], "--set", "output_len=16", "--set", "catalog=cat_far_prompts.toml",
     "--set", "dataset=dd"],
    ["run", "--set", "name=../escaped"], ["run", "--set", "name=a/b"],
    ["run", "--no-write", *FAST, "--set", "acceptance=0.9999999999"],
    ["run", "--set", "n=100000000000000000000"],
    ["run", "--no-write", "--set", "max_model_len=10"],
    ["run", "--no-write", "--set", "num_gpu_blocks_override=1"],
    ["run", "--no-write", "--set", "gpu_memory_utilization=0.1"],
    ["run", "--set", "bogus=1"], ["run", "--set", "reqests=5"], ["run", "--set", "k"],
    ["run", "--set", "k=abc"],
    ["run", "--set", "k=0"], ["run", "--set", "gpu=h900"], ["run", "--set", "engine.k=2"],
    ["run", "twice.toml"], ["run", "typo.toml"], ["run", "random.toml"], ["run", "folder"],
    ["run", "digits_rate.toml"], ["run", "--no-write", *FAST, "--set", "catalog=cat_digits.toml"],
    ["sweep", "sweep_digits.toml"],
    ["run", "nope.toml"],
    ["run", "--profile", "random.json"], ["run", "--profile", "folder"], ["run", "--profile", "list.json"],
    ["run", *FAST, "--out", "existing.txt"], ["run", *FAST, "--out", "."],
    ["run", *FAST, "--trace", "no/dir/t.json"], ["run", *FAST, "--trace", "existing.txt"],
    ["run", "--preset", "setting99"], ["run", "--method", "nosuch"], ["run", "--frobnicate"],
    ["run", "--set", "k=4", "--set", "k_policy=sometimes"],
    ["run", "--set", "tail=sometimes"], ["run", "--set", "method=sd", "--set", "tail=pre-draft"],
    # compare
    ["compare", *FAST, "--methods", "ar,nosuch"], ["compare", *FAST, "--methods", "sd,sd"],
    ["compare", *FAST, "--set", "gpu_memory_utilization=0.1"], ["compare", "--set", "requests=300000000"],
    ["compare", *FAST, "--out", "existing.txt"],
    ["compare", *FAST, "--methods", ""], ["compare", *FAST, "--set", "tail=pre-draft"],
    ["catalog", "--set", "catalog=cat_scalar.toml"],
    # scenario, catalog, theory
    ["scenario", "--set", "bogus=1"], ["scenario", "twice.toml"], ["scenario", "random.toml"],
    ["catalog", "--catalog", "random.toml"], ["catalog", "--catalog", "missing.toml"],
    ["theory", "--alpha", "-1"], ["theory", "--k-max", "0"], ["theory", "--bridge", "--ks", "5"],
    ["theory", "--plot", "existing.txt"], ["theory", "--alpha", "x"],
    ["theory", "--tail", "--set", "requests=0"],
    # paper, plan, sweep
    ["paper", "--workers", "0"], ["paper", "--preset", "x"],
    ["paper", "--quick", "--set", "k=3"], ["paper", "--quick", "--set", "requests=10"],
    ["paper", "--quick", "--set", "num_gpu_blocks_override=1"],
    ["plan", "missing.toml"], ["plan", "random.toml"], ["plan", "nothing_fits.toml", "--workers", "1"],
    ["plan", "nothing_fits.toml", "--workers", "0"], ["plan", "space_invalid.toml", "--workers", "1"],
    ["sweep", "sweep_empty.toml"], ["sweep", "sweep_text.toml"],
    ["sweep", "random.toml"], ["sweep", "sweep_bad.toml"], ["sweep", "typo.toml", "--out", "existing.txt"],
    ["sweep", "typo.toml", "--workers", "0"],
    *[["run", "--no-write", *FAST, "--set", f"catalog={name}"]
      for name in ("cat_scalar.toml", "cat_entry_scalar.toml", "cat_prior_scalar.toml", "cat_zero_link.toml",
                   "cat_slow_link.toml",
                   "cat_huge_gpu.toml", "cat_zero_weight.toml", "cat_nan_mu.toml")],
    *[["plan", name, "--workers", "2"] for name in ("plan_base_scalar.toml", "plan_text_number.toml",
                                                    "plan_huge_space.toml",
                                                    "plan_price_nan.toml",
                                                    "plan_price_typo.toml", "plan_slo_nan.toml",
                                                    "plan_rate_inf.toml", "plan_too_big.toml")],
    ["sweep", "sweep_preset_list.toml"], ["sweep", "sweep_log_text.toml"],
    ["sweep", "sweep_huge_sample.toml"], ["sweep", "typo.toml", "--set", "k=3"],
    ["run", "twice.toml", "typo.toml"],
    ["theory", "nope.toml"], ["theory", "--ks", "1-3"], ["theory", "--tail", "--ks", "1-3"],
    ["theory", "--set", "k=abc"], ["theory", "--alpha", "1e308"], ["theory", "--V", "1e-308"],
    ["theory", "--tail", "--alpha", "2"], ["theory", "--bridge", "--plot", "figs"],
    ["theory", "--tail", "--k-max", "4"],
    ["theory", "--bridge", "--ks", "1-2", *FAST, "--set", "num_gpu_blocks_override=1"],
    # calibrate
    ["calibrate", "random.json"], ["calibrate", "random.jsonl"], ["calibrate", "list.json"],
    ["calibrate", "folder"], ["calibrate", "missing.sqlite"], ["calibrate", "random.json", "--tp", "-2"],
    ["calibrate", "random.json", "--gpu", "rtx9999"], ["calibrate", "random.json", "--target", "gpt-9"],
    ["calibrate", "random.json", "--out", "existing.txt"],
    # validate and engine run: the engine's own fields and the scenario's
    ["validate", "--set", "warmup_passes=1"], ["validate", "--set", "engine.k=2"], ["validate", "--k", "0"],
    ["validate", "--set", "link=nvlink4"], ["validate", "--repeats", "0"],
    ["validate", "--set", "model.layers=0"],
    ["validate", "--engine", "vllm", "--set", "engine.colour=red"], ["validate", "--out", "existing.txt"],
    ["validate", "--engine", "vllm", "--models-dir", "missing"],
    ["validate", "--engine", "vllm", "--models-dir", "existing.txt"],
    ["validate", "--engine", "vllm", "--models-dir", "folder", "--set", "engine.models_dir=folder"],
    ["validate", "--models-dir", "folder"], ["validate", "--traces", "folder", "--models-dir", "folder"],
    ["engine", "run", "--engine", "tgi"], ["engine", "run", "--set", "engine.nosuch=1"],
    ["engine", "run", "--set", "model.draft_noise=3"], ["engine", "run", "--k", "x"],
    ["engine", "run", "--engine", "vllm", "--set", "dtype=auto"],
    ["engine", "run", "--set", "warmup_passes=1"],
    ["engine", "run", "--k", "100000", "--requests", "2", "--output-len", "4", "--m", "1"],
    ["engine"], ["engine", "stop"], ["nosuchcommand"], [],
    ["run", "--no-wr"], ["engine", "run", "--out", "8"],   # no abbreviations: --out is not --output-len
    ["engine", "run", ""], ["engine", "run", "--k", "3", " "],   # a stray empty word (an unset $VAR)
    ["validate", "--traces", "folder", "--max-error", "p50=5", "--max-error", "p50=50"],
    *DEEP_CASES,
    *(argv for _, argv in WIDE_DIGITS),
    *LONG_NAME_CASES,
    *(argv for _, _, argv in UNFOLLOWABLE),
]


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under root with a digest of its bytes (folders as 'dir', links as their
    target, a pipe as 'pipe')."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = ("link to " + os.readlink(path) if path.is_symlink() else "dir" if path.is_dir()
                    else "pipe" if path.is_fifo() else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    for name, content in FILES.items():
        if content is None:
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_bytes(content)
    for name, target in LINKS.items():
        (tmp_path / name).symlink_to(target)
    os.mkfifo(tmp_path / PIPE)
    monkeypatch.chdir(tmp_path)
    # A refusal that comes after work has run (every run of a paper grid infeasible) follows the
    # progress lines a slow or loaded machine shows past PROGRESS_AFTER_S: the corpus holds what
    # the refusal prints, so progress stays off here (tests/cli/test_progress.py holds it).
    monkeypatch.setattr("psdsim.commands.common.PROGRESS_AFTER_S", math.inf)
    return tmp_path


def _refused(argv: list[str], root: Path, capsys) -> str:
    before = _snapshot(root)
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, (argv, code, captured.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("psdsim: error: "), (argv, captured.err[-2000:])
    assert "Traceback" not in captured.err
    assert _snapshot(root) == before, argv   # nothing written, nothing deleted
    return lines[0]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) or "(none)" for c in CASES])
def test_malformed_input_is_one_line_exit_2_and_touches_nothing(argv, workdir, capsys):
    _refused(argv, workdir, capsys)


def test_an_unreadable_trace_is_one_line(workdir, capsys, monkeypatch):
    """(Tests run as root here, so permissions cannot make a file unreadable: the read fails instead.)"""
    real = Path.read_text

    def refuse(self, *args, **kwargs):
        if self.name == "locked.csv":
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    (workdir / "locked.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,10\n")
    monkeypatch.setattr(Path, "read_text", refuse)
    line = _refused(["run", "--no-write", "--set", "trace=locked.csv"], workdir, capsys)
    assert "Permission denied" in line and line.startswith("psdsim: error: trace: ")


@pytest.mark.parametrize("field,why,argv", UNFOLLOWABLE, ids=[" ".join(argv) for _, _, argv in UNFOLLOWABLE])
def test_a_path_the_system_cannot_follow_names_its_field_and_why(field, why, argv, workdir, capsys):
    line = _refused(argv, workdir, capsys)
    assert line.startswith(f"psdsim: error: {field}: ") and why in line, line


def test_a_name_too_long_for_its_results_folder_is_refused_as_the_name(workdir, capsys):
    """A 300-character name was refused at --out ("File name too long"; fix: choose a writable
    place with --out), after the checks, naming the wrong field and fix."""
    line = _refused(["run", *FAST, "--set", f"name={LONG}"], workdir, capsys)
    assert line.startswith("psdsim: error: name: 300 characters, past 200: it names result folders"), line
    line = _refused(["compare", *FAST, "--set", f"name={LONG}"], workdir, capsys)
    assert line.startswith("psdsim: error: name:"), line


@pytest.mark.parametrize("argv,field", [
    (["run", "--no-write", "--profile", "locked/p.json"], "profile"),
    (["run", "--no-write", "--set", "trace=locked/t.csv"], "trace"),
    (["run", "--no-write", "--set", "catalog=locked/c.toml"], "catalog"),
    (["run", "--no-write", "--set", "target=./locked/config.json"], "target"),
    (["validate", "--traces", "locked/r"], "--traces"),
    (["calibrate", "locked/t.json"], "locked/t.json"),
    (["run", "locked/s.toml"], "scenario"),
    (["run", *FAST, "--out", "locked/r"], "--out"),
])
def test_a_folder_psdsim_may_not_search_is_one_line_naming_the_field(argv, field, workdir, capsys,
                                                                     monkeypatch):
    """(Tests run as root here, whom permissions do not stop: looking inside `locked` fails instead.)"""
    real = Path.stat

    def refuse(self, *args, **kwargs):
        if "locked" in self.parts:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", refuse)
    line = _refused(argv, workdir, capsys)
    assert line.startswith(f"psdsim: error: {field}: ") and "(Permission denied)" in line, line
    assert "shorter or plainer" not in line


def test_the_messages_name_the_field_and_a_fix_that_is_not_circular(workdir, capsys):
    lines = {" ".join(argv): _refused(argv, workdir, capsys) for argv in CASES}
    for line in lines.values():
        field_problem, sep, fix = line.removeprefix("psdsim: error: ").rpartition("; fix: ")
        assert sep and fix and field_problem.split(":", 1)[0], line
        assert "fix the value named" not in line and "fix the catalog file" not in line
    assert lines["run --no-write --set max_model_len=10"].startswith("psdsim: error: max_model_len:")
    blocks = lines["run --no-write --set num_gpu_blocks_override=1"]
    assert "gpu_memory_utilization" not in blocks.split("fix:")[1]
    assert "prompt_tokens" in lines["run --no-write --set trace=huge.csv"]
    assert "is a folder" in lines["run --no-write --set trace=folder"]
    assert "did you mean 'requests'" in lines["run --set reqests=5"]
    assert lines["run digits_rate.toml"].startswith("psdsim: error: rate: must be a finite number")
    assert lines["sweep sweep_digits.toml"].startswith("psdsim: error: grid.rate: must be a finite number")
    assert "field 'memory_gb' must be float" in lines[" ".join(["run", "--no-write", *FAST, "--set",
                                                                "catalog=cat_digits.toml"])]
    assert "not a Kineto trace" in lines["calibrate list.json"]
    assert lines["theory --plot existing.txt"].startswith("psdsim: error: --plot:")
    assert "does not fit: does not fit" not in lines["plan nothing_fits.toml --workers 1"]
    assert lines["plan space_invalid.toml --workers 1"].count("fix:") == 1
    assert lines["run --set requests=1000000000"].startswith("psdsim: error: requests: ")
    assert lines["run --set n=100000000000000000000"].startswith("psdsim: error: n: ")
    trace_refusal = lines[" ".join(["run", *FAST, "--trace", "existing.txt"])]
    assert "fix: choose another file with --trace" in trace_refusal
    assert "[[]]" not in lines["sweep sweep_empty.toml"]
    assert 'write method = ["sd"]' in lines["sweep sweep_text.toml"]
    assert "names no method" in lines[" ".join(["compare", *FAST, "--methods", ""])]
    assert lines["catalog --set catalog=cat_scalar.toml"].endswith("fix: write --catalog cat_scalar.toml")
    assert "GB of memory" in lines["run --set requests=1000000000"]
    assert lines["validate --engine vllm --models-dir missing"].startswith(
        "psdsim: error: --models-dir: 'missing' not found")
    assert "is a file" in lines["validate --engine vllm --models-dir existing.txt"]
    for argv in DEEP_CASES[:-2]:   # calibrate says "not JSON"; scenario reads as run does
        assert "nests lists or tables too deeply" in lines[" ".join(argv)], argv
    assert "an empty argument ('')" in lines["engine run "]
    assert lines["sweep typo.toml --set k=3"].endswith("see `psdsim sweep --help`")   # not `psdsim --help`
    assert lines["run twice.toml typo.toml"].startswith(   # a second file is no "unknown option"
        "psdsim: error: arguments: 'typo.toml' is one argument more than the command takes")
    huge = lines["sweep sweep_huge_sample.toml"]
    assert huge.startswith("psdsim: error: sample.n: ") and "[sample] design" not in huge
    for field, argv in WIDE_DIGITS:
        assert lines[" ".join(argv)].startswith(f"psdsim: error: {field}: "), argv


# -- generated input ----------------------------------------------------------------------------

_values = st.one_of(st.integers(-10**9, 10**9), st.floats(allow_nan=False), st.booleans(),
                    st.text(max_size=12), st.lists(st.integers(0, 5), max_size=3))
_keys = st.one_of(st.sampled_from(sorted(FIELDS)), st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1,
                                                           max_size=10))


def _toml_value(value) -> str:
    return json.dumps(value) if not isinstance(value, bool) else ("true" if value else "false")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(_keys, _values, min_size=1, max_size=5),
       st.sampled_from(["", "run", "engine", "nope"]))
def test_generated_scenario_files(workdir, capsys, doc, table):
    """`psdsim scenario FILE` on a generated file: exit 0 with TOML on stdout, or a one-line refusal."""
    lines = [f"{key} = {_toml_value(value)}" for key, value in doc.items()]
    text = "\n".join(([f"[{table}]"] if table else []) + lines) + "\n"
    path = workdir / "gen.toml"
    path.write_text(text, encoding="utf-8")
    before = _snapshot(workdir)
    code = main(["scenario", str(path)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and _snapshot(workdir) == before
    if code != 0:
        assert code == 2 and len(captured.err.splitlines()) == 1, (text, captured.err)
        assert captured.err.startswith("psdsim: error: ")


_cells = st.one_of(st.integers(-5, 5000), st.floats(allow_nan=True), st.text(max_size=6), st.just(""))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_cells, _cells, _cells), min_size=0, max_size=4), st.booleans())
def test_generated_request_traces(workdir, capsys, rows, as_csv):
    """A generated trace either replays (exit 0) or is refused in one line."""
    if as_csv:
        body = "arrival_s,prompt_tokens,output_tokens\n" + "".join(
            ",".join(str(c).replace(",", ";").replace("\n", " ") for c in row) + "\n" for row in rows)
        name = "gen.csv"
    else:
        keys = ("arrival_s", "prompt_tokens", "output_tokens")
        body = "".join(json.dumps(dict(zip(keys, row, strict=True))) + "\n" for row in rows)
        name = "gen.jsonl"
    (workdir / name).write_text(body, encoding="utf-8")
    before = _snapshot(workdir)
    code = main(["run", "--no-write", "--json", "--set", f"trace={name}", "--set", "m=4"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and _snapshot(workdir) == before
    assert code in (0, 2), (body, captured.err)
    if code == 2:
        assert len(captured.err.splitlines()) == 1 and captured.err.startswith("psdsim: error: "), (body,
                                                                                                    captured.err)



NUMERIC_FIELDS = [name for name, f in FIELDS.items() if f.metadata["kind"] in (int, float)]


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_every_number_at_its_extreme_is_refused_in_one_line_or_runs(name, workdir, capsys):
    """1e300 (an integer field: 10**300) in each numeric field: a one-line refusal naming the
    field, or a clean run; no product of it may overflow into a traceback or a NaN."""
    huge = "1e300" if FIELDS[name].metadata["kind"] is float else "1" + "0" * 300
    argv = ["run", "--no-write", *FAST, "--set", f"{name}={huge}"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in captured.err, (argv, captured.err[-2000:])
    if code == 2:
        line, = captured.err.splitlines()
        assert line.startswith(f"psdsim: error: {name}: ") and len(line) < 400, line
