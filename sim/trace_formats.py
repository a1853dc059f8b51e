"""The request-trace formats a trace file may be in, each recognised by its columns.

A user's traffic is already written down in one of a few public shapes; each is read as it is,
never converted by hand first:

- psdsim's own (CSV or JSONL): `arrival_s` (seconds, replayed as written), `prompt_tokens`,
  `output_tokens`.
- the Azure LLM inference traces, 2023 and 2024 (CSV, Azure/AzurePublicDataset): `TIMESTAMP`
  (a date-time: 2023's naive with seven fractional digits, 2024's with a UTC offset; a naive
  one is read as UTC; offsets that differ are each converted to UTC exactly, and naive ones
  mixed with offset ones are refused, as nobody can tell which clock a naive one is on),
  `ContextTokens`, `GeneratedTokens`.
- BurstGPT (CSV, HPMLL/BurstGPT): `Timestamp` (seconds), `Request tokens`, `Response tokens`;
  `Model`, `Total tokens` and `Log Type` are not needed. Its failed requests have 0 response
  tokens, which no request can replay: its `_without_fails` files leave them out.
- Mooncake (JSONL, kvcache-ai/Mooncake): `timestamp` (milliseconds), `input_length`,
  `output_length`; `hash_ids` (shared prompt blocks) is not needed, as prefix caching is not
  modelled.
- a `vllm bench serve --save-result --save-detailed` result (one JSON document): per request
  `start_times` (seconds on the client's clock), `input_lens`, `output_lens`, `errors`.

Every format but the benchmark result (whose lists are the client's own) also reads an optional
`acceptance` column or key, the request's per-token acceptance, as psdsim's own does: a column a
user added to a public trace is theirs to replay, not one to drop in silence.

The arrivals of a public format count from its earliest request (their clocks start elsewhere:
a date, a collection's start, a process's timer); psdsim's own are replayed as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

NS_PER_S = 10**9
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?")


def datetime_ns(text: str) -> int:
    """Nanoseconds since 1970 of a date-time such as `2023-11-16 18:15:46.6805900`, read exactly
    (a float of seconds since 1970 keeps only a quarter of a microsecond; Azure's ticks are
    100 ns). Raises ValueError saying what a date-time looks like."""
    m = _DATETIME.fullmatch(text.strip())
    example = "a date-time like 2023-11-16 18:15:46.6805900 or 2024-05-10 00:00:00.009930+00:00"
    if m is None:
        raise ValueError(f"not {example}")
    zone = "+00:00" if m[3] in (None, "Z") else m[3]
    try:
        whole = datetime.fromisoformat(m[1] + zone)
    except ValueError:
        raise ValueError(f"not {example} (no such date or time)") from None
    seconds = (whole - _EPOCH) // timedelta(seconds=1)
    return seconds * NS_PER_S + int((m[2] or "").ljust(9, "0"))


def utc_offset(text: str) -> str | None:
    """The UTC offset a date-time (one `datetime_ns` reads) names, as `+HH:MM` (`Z` is
    `+00:00`); None for a naive one."""
    m = _DATETIME.fullmatch(text.strip())
    zone = m[3] if m else None
    if zone is None:
        return None
    if zone == "Z":
        return "+00:00"
    return zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"


@dataclass(frozen=True)
class TraceFormat:
    """Where one format keeps a request's arrival and lengths, and how its clock counts."""

    name: str
    arrival: str
    prompt: str
    output: str
    units_per_s: int                      # the arrival column's units in a second
    from_first: bool                      # arrivals count from the earliest request
    fix: str                              # what to do about a malformed row
    parse_arrival: Callable[[str], int] | None = None   # None: the column holds a number
    acceptance: str | None = "acceptance"  # the optional per-request acceptance column
    errors: str | None = None             # the column saying a request failed, when one does

    @property
    def columns(self) -> tuple[str, str, str]:
        return (self.arrival, self.prompt, self.output)

    def header(self) -> str:
        return ",".join(self.columns)


NATIVE = TraceFormat("psdsim", "arrival_s", "prompt_tokens", "output_tokens", 1, False,
                     "correct that row of the trace (columns: arrival_s, prompt_tokens, output_tokens, "
                     "acceptance)")
AZURE = TraceFormat("Azure LLM inference", "TIMESTAMP", "ContextTokens", "GeneratedTokens", NS_PER_S, True,
                    "correct that row (Azure's columns: TIMESTAMP, ContextTokens, GeneratedTokens; "
                    "optional acceptance)",
                    parse_arrival=datetime_ns)
BURSTGPT = TraceFormat("BurstGPT", "Timestamp", "Request tokens", "Response tokens", 1, True,
                       "correct or drop that row (BurstGPT's failed requests have 0 response tokens: "
                       "replay a BurstGPT_without_fails file)")
MOONCAKE = TraceFormat("Mooncake", "timestamp", "input_length", "output_length", 1000, True,
                       "correct that row (Mooncake's keys: timestamp in ms, input_length, output_length; "
                       "optional acceptance)")
VLLM_BENCH = TraceFormat("vllm bench serve", "start_times", "input_lens", "output_lens", 1, True,
                         "replay a result of completed requests, saved with --save-result --save-detailed",
                         acceptance=None, errors="errors")

FORMATS = {"csv": (NATIVE, AZURE, BURSTGPT), "jsonl": (NATIVE, MOONCAKE)}
# Keys only a `vllm bench serve` result holds: a JSON document with one of them is read as one.
BENCH_KEYS = ("input_lens", "output_lens", "request_throughput", "num_prompts")


def closest(fields: Iterable[str], kind: str) -> tuple[TraceFormat, list[str]]:
    """The format of `kind` ("csv" or "jsonl") sharing most columns with `fields` (psdsim's own on
    a tie) and the columns of it that `fields` lacks, in the format's order."""
    present = set(fields)
    best = max(FORMATS[kind], key=lambda f: sum(c in present for c in f.columns))
    return best, [c for c in best.columns if c not in present]


def known_headers(kind: str) -> str:
    """Every header of `kind` a trace may start with, for a message."""
    return "; ".join(f"{f.header()} ({f.name})" for f in FORMATS[kind])


def bench_rows(doc: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """A `vllm bench serve` result's requests as rows keyed by its list names, or no rows and the
    one-line reason they cannot be (a result saved without --save-detailed has no per-request
    lists; one without `start_times`, from a vLLM that did not record them, replays only if every
    request was sent at once: request_rate inf, no max_concurrency)."""
    for key in ("input_lens", "output_lens"):
        if not isinstance(doc.get(key), list):
            return [], f"field {key!r}: missing (the result holds no per-request lengths)"
    lists = {key: doc[key] for key in ("input_lens", "output_lens", "start_times", "errors")
             if isinstance(doc.get(key), list)}
    if "start_times" not in lists:
        if doc.get("request_rate") not in ("inf", None) or doc.get("max_concurrency") is not None:
            return [], ("field 'start_times': missing, and requests were paced (request_rate "
                        f"{doc.get('request_rate')!r}, max_concurrency {doc.get('max_concurrency')!r}), "
                        "so when each was sent is unknown")
        lists["start_times"] = [0.0] * len(lists["input_lens"])
    sizes = {key: len(values) for key, values in lists.items()}
    if len(set(sizes.values())) > 1:
        return [], f"its per-request lists differ in length ({sizes})"
    n = sizes["input_lens"]
    return [(f"request {i}", {key: values[i] for key, values in lists.items()}) for i in range(n)], None
