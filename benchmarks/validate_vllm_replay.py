"""A recorded `psdsim validate --engine vllm` predicted again from its own measurements.

The report folder's measured.json (vLLM's AR timings and its AR and SD runs) is predicted with this
checkout's engine/validate/vllm.py and, with --against COMMIT (repeatable), with that commit's
version of the file (read with `git show`, run beside this checkout's simulator): the same
measurements in every column, so the differences are the models' alone, not the machine's. The
question it answers: does pricing the per-step framework work once per step, apart from the passes,
predict vLLM's SD better than pricing every draft pass as a whole AR step (3fb1a45)? And does one
cost per SD step, fitted at k=1, predict the other k (against 9ad707c, the split alone)? And a cost
per draft pass besides, fitted with it at k=1 and k=2 (against fcfced9, the per-step cost alone)?
Needs no vLLM.

    python benchmarks/validate_vllm_replay.py REPORT_DIR --against 9ad707c --against 3fb1a45 [--record]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from recording import ROOT, Lines, add_record_flag, write

from psdsim.engine.validate import vllm as current
from psdsim.engine.validate.vllm_profile import split_steps
from psdsim.engine.vllm.config import TinySpec, VllmConfig


def base_config(doc: dict[str, Any]) -> tuple[VllmConfig, tuple[int, ...]]:
    """The run's VllmConfig and k from validate.json's `config`."""
    fields = {k: v for k, v in doc.items() if k not in ("ks", "batches", "repeats", "short", "long")}
    fields["tiny"] = TinySpec(**fields["tiny"])
    fields["models_dir"] = Path(fields["models_dir"]) if fields.get("models_dir") else None
    if fields.get("prompt_lens") is not None:
        fields["prompt_lens"] = tuple(fields["prompt_lens"])
    return VllmConfig(**fields), tuple(doc["ks"])


# What an older engine/validate/vllm.py imports from where it has since moved: its import lines are
# pointed at the new homes (the names, and so the code that runs, are the same).
MOVED_IMPORTS = {
    "from psdsim.sim.output.results import write_file":
        "from psdsim.sim.output.atomic_writes import write_file",
    "from psdsim.sim.profile import Profile, Term": "from psdsim.sim.profile_schema import Profile, Term",
}


def baseline(commit: str) -> ModuleType:
    """engine/validate/vllm.py as it was at `commit`, importable beside this checkout's psdsim: a
    commit from before that file was split, while it held the whole model. A later commit's file
    imports its profile fit from engine/validate/vllm_profile.py, which here would be this
    checkout's, not the commit's: such a commit is refused, and is compared by running this
    script in a checkout of it."""
    split = subprocess.run(["git", "cat-file", "-e", f"{commit}:engine/validate/vllm_profile.py"], cwd=ROOT,
                           capture_output=True, check=False).returncode == 0
    if split:
        sys.exit(f"--against {commit}: its engine/validate/vllm.py imports its model from beside it, "
                 "which this script cannot read from a commit; run this script in a checkout of that "
                 "commit instead")
    text = subprocess.run(["git", "show", f"{commit}:engine/validate/vllm.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    for old, new in MOVED_IMPORTS.items():
        text = text.replace(old, new)
    spec = importlib.util.spec_from_loader(f"validate_vllm_{commit}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up by name
    exec(compile(text, f"{commit}:engine/validate/vllm.py", "exec"), module.__dict__)
    return module


def rows_of(module: ModuleType, base: VllmConfig, ks: tuple[int, ...], measured: dict[str, Any],
            out: Path) -> dict[str, dict[str, Any]]:
    report = module.predict(module.VllmValidateConfig(base, out, ks), measured)
    return {row["run"]: row["metrics"] for row in report["rows"]}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}%"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="a `psdsim validate --engine vllm` report folder")
    p.add_argument("--against", action="append", default=[],
                   help="also predict with this commit's engine/validate/vllm.py (repeatable)")
    add_record_flag(p)
    args = p.parse_args()
    measured = json.loads((args.report / "measured.json").read_text())
    base, ks = base_config(json.loads((args.report / "validate.json").read_text())["config"])
    say = Lines()
    with tempfile.TemporaryDirectory() as tmp:
        new = rows_of(current, base, ks, measured, Path(tmp) / "new")
        spec = json.loads((Path(tmp) / "new" / "validate.json").read_text())["spec_step"]
        old = [rows_of(baseline(c), base, ks, measured, Path(tmp) / c) for c in args.against]
        split = split_steps(measured["ar_steps"])
    f, draft, verify = split.framework, split.profile.terms["draft"], split.profile.terms["verify"]
    per_pass = f" and per draft pass {spec['pass_ms']:.2f} ms" if spec.get("pass_ms") is not None else ""
    say(f"per-step work {1e3 * f.fixed:.2f} ms + {1e6 * f.per_request:.0f} us per request; the target's "
        f"layers {1e3 * verify.coef[0]:.2f} ms + {1e6 * verify.coef[1]:.0f} us per token; a draft pass "
        f"{1e3 * draft.coef[0]:.2f} ms + {1e6 * draft.coef[1]:.0f} us per request; per SD step "
        + (f"{spec['ms']:.2f} ms{per_pass} (fitted to {' and '.join(spec['fitted_on'])}, marked *)"
           if spec["fitted_on"] else spec["note"]))
    against = "".join(f"{'at ' + c:>14}" for c in args.against)
    say(f"{'run':<7}{'tok/s measured':>16}{'error now':>11}{against}"
        f"{'p50 ms measured':>17}{'error now':>11}{against}")

    def errors(run: str, key: str) -> str:
        return "".join(f"{pct(before.get(run, {}).get(key, {}).get('error')):>14}" for before in old)

    for run, cells in new.items():
        tok, p50 = cells["output_tok_s"], cells["latency_ms.p50"]
        name = run + ("*" if run in (spec["fitted_on"] or []) else "")
        say(f"{name:<7}{tok['measured']:>16.1f}{pct(tok['error']):>11}{errors(run, 'output_tok_s')}"
            f"{p50['measured']:>17.0f}{pct(p50['error']):>11}{errors(run, 'latency_ms.p50')}")
    if args.record:
        path = write("validate_vllm_replay", "vLLM validation predicted again from its measurements", say,
                     f"Report folder `{args.report}` (measured by `psdsim validate --engine vllm`); error = "
                     "(predicted - measured) / measured.")
        print(f"recorded in {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
