"""Acceptance as vLLM reports it: its Prometheus metrics and its periodic log lines, read into
counts of drafts, draft tokens and accepted tokens (per position where the source gives them).

Three sources, told apart by content:

- Prometheus text exposition (`curl SERVER/metrics`): the counters
  `vllm:spec_decode_num_drafts`, `…num_draft_tokens`, `…num_accepted_tokens` and
  `…num_accepted_tokens_per_pos{position="i"}` (the drafts whose first i + 1 tokens were accepted),
  with or without the `_total` suffix, summed over their label sets (one per engine).
- vLLM V1's log lines `SpecDecoding metrics: … Accepted: N tokens, Drafted: M tokens,
  Per-position acceptance rate: r0, r1, …`: each counts the interval since the one before, so the
  lines are summed (an interval's drafts are M / k, its per-position counts r_i x M / k).
- vLLM V0's log lines `Speculative metrics: … Number of speculative tokens: k, Number of accepted
  tokens: N, Number of draft tokens: M, …`: each counts from the engine's start, so the last
  line holds them all. V0 reports no per-position counts.

A draft is taken to hold k tokens (a draft model's or EAGLE's; an n-gram proposer's may be
shorter). Whatever cannot be read is a TraceError naming the file and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from psdsim.calibration.trace_error import TraceError
from psdsim.sim.scenario import MAX_K

PROMETHEUS = "vLLM Prometheus metrics"
V1_LOG = "vLLM V1 SpecDecoding metrics log"
V0_LOG = "vLLM V0 Speculative metrics log"
PROM_PREFIX = "vllm:spec_decode_"
V1_MARK, V0_MARK = "SpecDecoding metrics:", "Speculative metrics:"
MARKERS = ((PROM_PREFIX, PROMETHEUS), (V1_MARK, V1_LOG), (V0_MARK, V0_LOG))
VARYING = "drafts of varying length (an n-gram proposer's?), which a prior for drafts of k does not describe"
FIX = "give vLLM's /metrics text or a server log with spec-decoding metrics lines (docs/calibration.md)"

_SAMPLE = re.compile(r'(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>(?:[^"}]|"(?:\\.|[^"\\])*")*)\})?'
                     r"\s+(?P<value>\S+)(?:\s+\S+)?\s*")
_POSITION = re.compile(r'(?:^|,)\s*position="(\d+)"')
_V1_FIELDS = {"accepted": re.compile(r"Accepted: (\d+) tokens"),
              "drafted": re.compile(r"Drafted: (\d+) tokens"),
              "rates": re.compile(r"Per-position acceptance rate: (\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*)")}
_V1_MEAN_LENGTH = re.compile(r"Mean acceptance length: (\d+(?:\.\d+)?)")
_V0_LINE = re.compile(r"Number of speculative tokens: (\d+), Number of accepted tokens: (\d+), "
                      r"Number of draft tokens: (\d+)")


@dataclass(frozen=True)
class AcceptanceCounts:
    """What an engine counted of its speculation: `per_position[i]` drafts accepted their first
    i + 1 tokens (empty where the source does not say)."""

    source: str
    k: int
    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float, ...] = ()

    @property
    def mean_accepted(self) -> float:
        """Accepted drafts per verification (vLLM's mean acceptance length less the bonus token)."""
        return self.accepted / self.drafts

    @property
    def position_rates(self) -> tuple[float, ...]:
        """P(accepted >= i + 1): vLLM's per-position acceptance rates."""
        return tuple(n / self.drafts for n in self.per_position)

    @property
    def conditional_rates(self) -> tuple[float, ...]:
        """P(position i accepted | every earlier one was): flat for i.i.d. acceptance."""
        rates = self.position_rates
        before = (1.0, *rates)[:len(rates)]   # no rates, no positions before them
        return tuple(r / prev if prev > 0 else math.nan for r, prev in zip(rates, before, strict=True))


def metrics_kind(path: Path) -> str | None:
    """Which acceptance source the file is, from its text; None for any other file (a binary
    trace, or text with no spec-decoding metrics; a folder, pipe or device, which is not opened:
    reading a pipe would wait forever)."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as fh:
            head = fh.read(4)
            if head[:1] in (b"{", b"[") or head.startswith((b"SQLi", b"\x1f\x8b")):
                return None
            text = (head + fh.read()).decode("utf-8", errors="replace")
    except OSError:
        return None
    found = [(text.find(mark), kind) for mark, kind in MARKERS if mark in text]
    return min(found)[1] if found else None


def read_acceptance(path: Path) -> AcceptanceCounts:
    """The counts in one acceptance source (metrics_kind names which)."""
    kind = metrics_kind(path)
    if kind is None:
        raise TraceError(path, "holds no vLLM spec-decoding metrics", FIX)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    counts = {PROMETHEUS: _prometheus, V1_LOG: _v1_log, V0_LOG: _v0_log}[kind](path, lines)
    if counts.drafts <= 0 or counts.draft_tokens <= 0:
        raise TraceError(path, "counts no drafts: the engine did not speculate while it was measured",
                         "measure a run that speculated (num_speculative_tokens >= 1, requests served)")
    if not 0 <= counts.accepted <= counts.draft_tokens:
        raise TraceError(path, f"accepts {counts.accepted:g} of {counts.draft_tokens:g} draft tokens",
                         "give the metrics of one engine as it reported them")
    _check_draft_length(path, counts.k)
    _check_positions(path, counts.position_rates)
    return counts


def _check_draft_length(where: str | Path, k: int) -> None:
    """A draft length a scenario can simulate (beyond it the prior's fit would not end)."""
    if k > MAX_K:
        raise TraceError(where, f"drafts {k} tokens a step, past the {MAX_K} a scenario's k may be",
                         f"measure a configuration of num_speculative_tokens <= {MAX_K}")


def _finite(where: str | Path, what: str, value: float) -> float:
    """`value`, refused where a count (or a sum of counts) is past a float's range."""
    if math.isinf(value):
        raise TraceError(where, f"{what} is past a float's range", "give the counts as vLLM reported them")
    return value


def _check_positions(path: Path, rates: tuple[float, ...]) -> None:
    """Per-position rates a real engine can report: each a fraction of the drafts, none above the
    one before it, as a draft token is accepted only if every one before it was."""
    for i, rate in enumerate(rates):
        if rate > 1:
            raise TraceError(path, f"position {i} is accepted at rate {rate:g}, above 1: in more drafts "
                             "than there were", "give the metrics of one engine as it reported them")
        if i and rate > rates[i - 1]:
            raise TraceError(path, f"position {i} is accepted more often ({rate:g}) than position {i - 1} "
                             f"({rates[i - 1]:g}), where a draft token is accepted only if every one "
                             "before it was", "give the metrics of one engine as it reported them")


def _metric(name: str) -> str:
    base = name.removeprefix(PROM_PREFIX)
    return base.removesuffix("_total")


def _prometheus(path: Path, lines: list[str]) -> AcceptanceCounts:
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for number, line in enumerate(lines, start=1):
        if not line.startswith(PROM_PREFIX) or line.startswith("#") or "_created" in line.split("{")[0]:
            continue
        m = _SAMPLE.fullmatch(line)
        value = _float(m["value"]) if m else math.nan
        if math.isinf(value):
            raise TraceError(f"{path} line {number}", f"a count that is not finite ({m['value']} is past a "
                             "float's range)",
                             "give the counters as the server reported them")
        if not value >= 0:   # NaN fails too
            raise TraceError(f"{path} line {number}", "not a Prometheus sample `name{labels} value` with a "
                             "count >= 0", FIX)
        name = _metric(m["name"])
        if name == "num_accepted_tokens_per_pos":
            position = _POSITION.search(m["labels"] or "")
            if position is None:
                raise TraceError(f"{path} line {number}", "a per-position count without a position label",
                                 FIX)
            at = _whole(f"{path} line {number}", "its position label", position[1])
            per_pos[at] = per_pos.get(at, 0.0) + value
        elif name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            totals[name] = totals.get(name, 0.0) + value
    for name in ("num_draft_tokens", "num_accepted_tokens"):
        if name not in totals:
            raise TraceError(path, f"has no {PROM_PREFIX}{name}_total counter", FIX)
    for name, total in (*totals.items(), ("num_accepted_tokens_per_pos", sum(per_pos.values()))):
        _finite(path, f"the sum of its {PROM_PREFIX}{name} counters", total)
    if totals.get("num_drafts", 0) > totals["num_draft_tokens"]:
        raise TraceError(path, f"counts more drafts ({totals['num_drafts']:g}) than draft tokens "
                         f"({totals['num_draft_tokens']:g}), where every draft holds at least one",
                         "give the counters of one engine as scraped at one moment")
    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise TraceError(path, f"its per-position counts skip a position ({sorted(per_pos)})", FIX)
    k = len(per_pos) or (round(totals["num_draft_tokens"] / totals["num_drafts"])
                         if totals.get("num_drafts") else 0)
    if k < 1:
        raise TraceError(path, "says neither how many drafts there were nor their length (no num_drafts, "
                         "no per-position counts)", FIX)
    drafts = totals.get("num_drafts", totals["num_draft_tokens"] / k)
    if abs(totals["num_draft_tokens"] - k * drafts) > 0.5:
        raise TraceError(path, f"counts {totals['num_draft_tokens']:g} draft tokens in {drafts:g} drafts, "
                         f"not {k} each: {VARYING}", FIX)
    if per_pos and abs(sum(per_pos.values()) - totals["num_accepted_tokens"]) > 0.5:
        # a draft accepting j tokens counts once at each of positions 0..j-1 (E[G] = sum P(G >= j))
        raise TraceError(path, f"its per-position counts sum to {sum(per_pos.values()):g}, not the "
                         f"{totals['num_accepted_tokens']:g} accepted tokens they count",
                         "give the counters of one engine as scraped at one moment")
    return AcceptanceCounts(PROMETHEUS, k, drafts, totals["num_draft_tokens"], totals["num_accepted_tokens"],
                            tuple(per_pos[i] for i in range(len(per_pos))))


def _whole(where: str, what: str, digits: str) -> int:
    """A position or a draft length, as digits: more than an int64 holds is no engine's figure
    (and past 4,300 digits Python's int() itself refuses, with a traceback)."""
    if len(digits) > 18:
        raise TraceError(where, f"{what} has {len(digits)} digits, more than any engine prints", FIX)
    return int(digits)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _v1_log(path: Path, lines: list[str]) -> AcceptanceCounts:
    k = 0
    drafted = accepted = drafts = 0.0
    per_pos: list[float] = []
    for number, line in enumerate(lines, start=1):
        if V1_MARK not in line:
            continue
        found = {key: rx.search(line) for key, rx in _V1_FIELDS.items()}
        missing = [key for key, m in found.items() if m is None]
        if missing:
            raise TraceError(f"{path} line {number}", f"a {V1_MARK!r} line without its {missing[0]} count "
                             "(Accepted: N tokens, Drafted: M tokens, Per-position acceptance rate: …)", FIX)
        rates = [float(r) for r in found["rates"][1].split(", ")]
        if k and len(rates) != k:
            raise TraceError(f"{path} line {number}", f"{len(rates)} per-position rates where earlier lines "
                             f"had {k}: the log holds runs of different num_speculative_tokens",
                             "give the log of one configuration")
        k = len(rates)
        where = f"{path} line {number}"
        n_drafted = _finite(where, "its Drafted count", float(found["drafted"][1]))
        interval_drafts = n_drafted / k
        drafted += n_drafted
        accepted += _finite(where, "its Accepted count", float(found["accepted"][1]))
        drafts += interval_drafts
        mean_length = _V1_MEAN_LENGTH.search(line)
        if mean_length and interval_drafts and \
                abs(1 + float(found["accepted"][1]) / interval_drafts - float(mean_length[1])) > 0.005 + 1e-9:
            raise TraceError(f"{path} line {number}", f"mean acceptance length {mean_length[1]} is not what "
                             f"{found['accepted'][1]} accepted tokens in drafts of {k} give: {VARYING}", FIX)
        _check_v1_positions(f"{path} line {number}", float(found["accepted"][1]), rates, interval_drafts)
        per_pos = [total + r * interval_drafts for total, r in zip(per_pos or [0.0] * k, rates, strict=True)]
    _finite(path, "the sum of its Drafted counts", drafted)
    _finite(path, "the sum of its Accepted counts", accepted)
    return AcceptanceCounts(V1_LOG, k, drafts, drafted, accepted, tuple(round(n) for n in per_pos))


def _check_v1_positions(where: str, accepted: float, rates: list[float], drafts: float) -> None:
    """An interval's per-position rates count its accepted tokens (E[G] = sum P(G >= i)), to the
    three decimals vLLM prints them with."""
    counted = sum(rates) * drafts
    if abs(counted - accepted) > 0.0005 * len(rates) * drafts + 0.5:
        raise TraceError(where, f"its per-position rates count {counted:g} accepted tokens, not the "
                         f"{accepted:g} the line says", "give the log lines as vLLM wrote them")


def _v0_log(path: Path, lines: list[str]) -> AcceptanceCounts:
    last: tuple[int, re.Match[str]] | None = None
    for number, line in enumerate(lines, start=1):
        if V0_MARK in line:
            m = _V0_LINE.search(line)
            if m is None:
                raise TraceError(f"{path} line {number}", f"a {V0_MARK!r} line without its counts (Number of "
                                 "speculative tokens: k, Number of accepted tokens: N, Number of draft "
                                 "tokens: M)", FIX)
            last = (number, m)
    assert last is not None   # metrics_kind found the marker
    number, m = last
    where = f"{path} line {number}"
    k = _whole(where, "its Number of speculative tokens", m[1])
    accepted = _finite(where, "its Number of accepted tokens", float(m[2]))
    drafted = _finite(where, "its Number of draft tokens", float(m[3]))
    if k < 1:
        raise TraceError(where, "Number of speculative tokens is 0", FIX)
    _check_draft_length(where, k)
    if drafted % k:
        raise TraceError(where, f"counts {drafted:g} draft tokens, not a whole number of drafts of {k}: "
                         f"{VARYING}", FIX)
    return AcceptanceCounts(V0_LOG, k, drafted / k, drafted, accepted)


def combined(counts: list[AcceptanceCounts], paths: list[Path]) -> AcceptanceCounts:
    """The counts of several sources of one configuration (several engines' or servers'), added;
    per-position counts only where every source has them."""
    ks = {c.k for c in counts}
    if len(ks) > 1:
        raise TraceError("traces", f"the sources speculate different numbers of tokens ({sorted(ks)})",
                         "give the metrics of one configuration (one num_speculative_tokens)")
    per_position = tuple(map(sum, zip(*(c.per_position for c in counts), strict=True))) \
        if all(c.per_position for c in counts) else ()
    source = counts[0].source if len({c.source for c in counts}) == 1 else "vLLM metrics"
    totals = {what: _finite("traces", f"the sum of the sources' {what}",
                            sum(getattr(c, what) for c in counts))
              for what in ("drafts", "draft_tokens", "accepted")}
    return AcceptanceCounts(source, counts[0].k, totals["drafts"], totals["draft_tokens"], totals["accepted"],
                            per_position)
