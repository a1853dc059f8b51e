"""CI gating on a validation report: `--max-error METRIC=PCT` and `--junit FILE`.

A gate bounds the |relative error| of a metric on the held-out runs (the rows that are not
in-sample: their traces made no part of the profile). A cell whose run measured the metric but
has no prediction misses; a cell the run did not measure (an AR run's VSR) is not checked.
`report["gate"]` records the bounds, every miss and the worst cell; the command exits 1 when one
misses (2 stays for bad input). The JUnit file has one test case per row and metric, so that CI
systems list every comparison; a gated held-out cell that misses is a failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from xml.etree import ElementTree as ET

from psdsim.engine.validate.report import METRICS, format_error, format_value
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import number

# Short names for the report's metric keys (either may be given).
ALIASES = {"throughput": "throughput_tok_s", "e2el": "e2el_ms", "p50": "latency_ms.p50",
           "p99": "latency_ms.p99", "par_rate": "parallelization_rate", "vsr": "vsr"}
KEYS = tuple(key for key, _ in METRICS)


def parse_max_errors(items: Sequence[str], keys: Sequence[str] = KEYS,
                     aliases: Mapping[str, str] = ALIASES) -> dict[str, float]:
    """`METRIC=PCT` items -> {metric key: bound as a fraction}, METRIC one of `keys` or its
    alias (a traces report's by default); one-line errors name the flag."""
    bounds: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        key = aliases.get(name.strip(), name.strip())
        if not sep or key not in keys:
            raise ScenarioError("--max-error", f"expected METRIC=PCT with METRIC one of "
                                f"{', '.join([*aliases, *keys])}, got {item!r}",
                                "write e.g. --max-error p50=8")
        try:
            pct = number(value.strip().removesuffix("%"))
        except ValueError:
            pct = -1.0
        if not pct > 0 or pct == float("inf"):
            raise ScenarioError("--max-error", f"{name.strip()}: expected a positive percentage, "
                                f"got {value!r}", f"write e.g. --max-error {name.strip()}=5")
        if key in bounds:   # the later bound would replace the earlier without a word
            raise ScenarioError("--max-error", f"{key} is given twice", "give each metric one bound")
        bounds[key] = pct / 100
    return bounds


def check(rows: Sequence[Mapping[str, Any]], bounds: Mapping[str, float]) -> dict[str, Any]:
    """Every held-out cell a bound covers, against it: the misses, worst first."""
    checked, missed = 0, []
    for row in rows:
        if row["in_sample"]:
            continue
        for key, bound in bounds.items():
            cell = row["metrics"][key]
            if cell["measured"] is None:
                continue
            checked += 1
            err = cell["error"]
            if err is None or abs(err) > bound:
                missed.append({"run": row["run"], "metric": key, "error": err, "bound": bound,
                               "measured": cell["measured"], "predicted": cell["predicted"]})
    missed.sort(key=lambda m: -(float("inf") if m["error"] is None else abs(m["error"]) / m["bound"]))
    return {"bounds": dict(bounds), "checked": checked, "missed": missed,
            "worst": missed[0] if missed else None, "passed": not missed}


def gate_line(gate: Mapping[str, Any]) -> str:
    """One line: the worst missed cell, and how many missed."""
    w = gate["worst"]
    if w is None:
        return f"gate passed: {gate['checked']} held-out cells within their bounds"
    return (f"gate missed: {w['run']} {w['metric']} error {format_error(w['error'])} outside "
            f"±{100 * w['bound']:g}% (measured {format_value(w['measured'], w['metric'])}, predicted "
            f"{format_value(w['predicted'], w['metric'])}); {len(gate['missed'])} of {gate['checked']} "
            "held-out cells missed")


def junit_xml(report: Mapping[str, Any]) -> str:
    """The rows as JUnit XML: a suite `psdsim validate`, a case per run and metric."""
    gate = report.get("gate") or {"bounds": {}, "missed": []}
    misses = {(m["run"], m["metric"]): m for m in gate["missed"]}
    suite = ET.Element("testsuite", name="psdsim validate")
    cases = failures = skipped = 0
    for row in report["rows"]:
        for key in KEYS:
            cell = row["metrics"][key]
            case = ET.SubElement(suite, "testcase", classname=f"psdsim.validate.{row['run']}", name=key)
            cases += 1
            text = (f"measured {format_value(cell['measured'], key)}, predicted "
                    f"{format_value(cell['predicted'], key)}, error {format_error(cell['error'])}; "
                    + ("in-sample" if row["in_sample"] else "held out"))
            if key in gate["bounds"]:
                text += f"; bound ±{100 * gate['bounds'][key]:g}%"
            ET.SubElement(case, "system-out").text = text
            miss = misses.get((row["run"], key))
            if miss is not None:
                failures += 1
                ET.SubElement(case, "failure", message=f"error {format_error(miss['error'])} outside "
                              f"±{100 * miss['bound']:g}%", type="psdsim.gate")
            elif cell["measured"] is None:
                skipped += 1
                ET.SubElement(case, "skipped", message="not measured for this run")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
