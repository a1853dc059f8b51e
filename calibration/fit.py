"""Fitting step samples to the profile terms of sim/profile_schema.py.

Per term: build the feature matrix from the samples (the feature functions are sim's own, so the
fit and the simulator cannot disagree on what a coefficient means), drop samples that lack a
needed attribute, leave out features the samples cannot identify (missing everywhere, or constant
or collinear in these samples: their coefficient is 0 and the report says so), then non-negative
least squares with robust outlier rejection: samples whose residual exceeds 5 robust standard
deviations (1.4826 x MAD) and 2% of their own time are dropped, and the fit repeated, at most 5
times. Quality: in-sample MAPE, and k-fold cross-validated MAPE (5 interleaved folds; no random
split, so the same samples always give the same profile).

Uncertainty: the kept samples of each term are resampled with replacement and refitted
(`bootstrap_term`), from a numpy Generator seeded by the caller, so the same samples and seed give
the same resamples. Whole coefficient vectors are kept, not per-coefficient intervals: a term's
coefficients trade off against each other (a larger per-token cost, a smaller fixed one), and a
draw that takes one whole vector keeps that correlation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.acceptance import alpha_for_accepted
from psdsim.sim.profile_schema import (
    FEATURES,
    RANGE_VARIABLES,
    Term,
    draft_features,
    message_features,
    prefill_features,
    verify_features,
)
from psdsim.sim.scenario import MAX_K

OUTLIER_SIGMAS = 5.0
OUTLIER_FLOOR = 0.02
MAX_ROUNDS = 5
FOLDS = 5
MIN_SAMPLES = 3
BOOTSTRAP_RESAMPLES = 64     # coefficient vectors kept per term: enough for the draws --intervals runs
MIN_BOOTSTRAP_SAMPLES = 8    # below this a resample repeats too few distinct samples to mean anything
BOOTSTRAP_SEED = 0           # calibrate has no --seed: a fixed one keeps the profile reproducible
RANGE_ATTRIBUTE = {"bytes": "nbytes"}


def _tokens(s: StepSample) -> float:
    if not math.isnan(s.tokens):
        return s.tokens
    return s.batch * (1 + s.k)  # every request scores its proposals + 1


def _features(term: str, s: StepSample) -> tuple[float, ...]:
    """The term's features of one sample (NaN where the sample lacks an input)."""
    if term == "draft":
        return draft_features(s.batch, s.k, s.ctx)
    if term == "verify":
        return verify_features(_tokens(s), s.ctx)
    if term in ("prefill", "draft_prefill"):
        return prefill_features(s.tokens, s.pairs, s.ctx)
    if term in ("comm", "broadcast"):
        return message_features(s.nbytes)
    if term == "reject":
        return (1.0, s.positions)
    return (1.0,)


def _identifiable(X: np.ndarray) -> list[int]:
    """Columns kept in order while each adds rank (scaled, so units do not matter)."""
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale
    keep: list[int] = []
    for j in range(X.shape[1]):
        if not np.any(Xs[:, j]):
            continue
        trial = Xs[:, [*keep, j]]
        if np.linalg.matrix_rank(trial, tol=1e-9 * max(trial.shape)) == len(keep) + 1:
            keep.append(j)
    return keep


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NNLS on columns and times scaled to at most 1: a well-scaled problem, and one that cannot
    overflow inside scipy's solver (a step timed at 1e308 s crashed the process there)."""
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    y_scale = float(np.abs(y).max()) or 1.0
    coef, _ = nnls(X / scale, y / y_scale)
    return coef * y_scale / scale


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    with np.errstate(over="ignore"):   # an absurd sample overflows to inf: _check_finite refuses it
        return float(np.mean(np.abs(pred - y) / y))


def _robust_fit(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients and the mask of samples kept after outlier rejection."""
    keep = np.ones(len(y), dtype=bool)
    coef = _nnls(X, y)
    for _ in range(MAX_ROUNDS):
        resid = y - X @ coef
        r = resid[keep]
        sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        out = (np.abs(resid) > OUTLIER_SIGMAS * sigma) & (np.abs(resid) > OUTLIER_FLOOR * y) & keep
        if not out.any() or keep.sum() - out.sum() < max(MIN_SAMPLES, X.shape[1]):
            break
        keep &= ~out
        coef = _nnls(X[keep], y[keep])
    return coef, keep


def _cross_validated(X: np.ndarray, y: np.ndarray) -> float | None:
    if len(y) < 2 * FOLDS:
        return None
    fold = np.arange(len(y)) % FOLDS
    pred = np.empty_like(y)
    for f in range(FOLDS):
        train = fold != f
        pred[~train] = X[~train] @ _nnls(X[train], y[train])
    return _mape(pred, y)


@dataclass(frozen=True)
class TermFit:
    """A fitted term with what the report shows beside it."""

    term: Term
    kept: list[StepSample]
    predicted: np.ndarray   # fitted seconds of `kept`
    notes: list[str]
    features: np.ndarray    # kept x FEATURES[name]: the rows the coefficients were fitted to
    times: np.ndarray       # the measured seconds of `kept`

    def mean_time(self, coef: Sequence[float]) -> float:
        """The mean time `coef` prices the kept samples at: one number to order and compare
        coefficient vectors of this term by."""
        return float(np.mean(self.features @ np.asarray(coef, dtype=float)))


def fit_term(name: str, samples: list[StepSample], timing: str = "busy") -> TermFit | None:
    """Fit one term to its samples; None when too few usable samples remain."""
    dropped: Counter[str] = Counter()
    usable, rows, ys = [], [], []
    for s in samples:
        y = s.span_s if timing == "span" else s.duration_s
        if s.mixed:
            dropped["target pass carrying prefill chunks too (mixed)"] += 1
        elif not y > 0:
            dropped["zero or negative duration"] += 1
        else:
            usable.append(s)
            rows.append(_features(name, s))
            ys.append(y)
    notes: list[str] = []
    if len(usable) < MIN_SAMPLES:
        return None
    X, y = np.array(rows, dtype=float), np.array(ys, dtype=float)
    # Features missing in every sample are left out; samples missing a feature others have, dropped.
    present = ~np.isnan(X).all(axis=0)
    missing_rows = np.isnan(X[:, present]).any(axis=1)
    for s in np.nonzero(missing_rows)[0]:
        dropped[f"missing {_missing_attr(name, usable[s])}"] += 1
    keep_rows = ~missing_rows
    if keep_rows.sum() < MIN_SAMPLES:
        return None
    X, y = np.nan_to_num(X[keep_rows]), y[keep_rows]
    usable = [s for s, k in zip(usable, keep_rows, strict=True) if k]
    cols = [j for j in _identifiable(X) if present[j]]
    features = FEATURES[name]
    fixed = tuple(f for j, f in enumerate(features) if j not in cols)
    for f in fixed:
        why = "not in the trace" if not present[features.index(f)] else "constant or collinear in the samples"
        notes.append(f"{name}: feature {f} {why}; coefficient fixed at 0")
    coef_kept, mask = _robust_fit(X[:, cols], y)
    coef = np.zeros(len(features))
    coef[cols] = coef_kept
    dropped["outlier (residual > 5 robust sigma and > 2%)"] += int((~mask).sum())
    Xk, yk = X[mask], y[mask]
    pred = Xk @ coef
    kept = [s for s, k in zip(usable, mask, strict=True) if k]
    ranges = {}
    for var in RANGE_VARIABLES[name]:
        attr = RANGE_ATTRIBUTE.get(var, var)
        values = np.array([_tokens(s) if attr == "tokens" and name == "verify" else getattr(s, attr)
                           for s in kept], dtype=float)
        values = values[~np.isnan(values)]
        if len(values):
            ranges[var] = (float(values.min()), float(values.max()))
    term = Term(name, tuple(float(c) for c in coef), len(kept), _mape(pred, yk),
                _cross_validated(Xk[:, cols], yk), ranges, {k: v for k, v in dropped.items() if v},
                fixed)
    return TermFit(term, kept, pred, notes, Xk, yk)


def bootstrap_term(fit: TermFit, rng: np.random.Generator,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[tuple[float, ...], ...]:
    """`resamples` refits of the term on its kept samples drawn with replacement (plain NNLS on
    the columns the point fit identified: outliers were rejected once, by the point fit), ordered
    by the mean time they price the samples at, so a draw's index ranks as its cost does."""
    features = FEATURES[fit.term.name]
    cols = [j for j, f in enumerate(features) if f not in fit.term.fixed_features]
    n = len(fit.times)
    vectors = []
    for _ in range(resamples):
        rows = rng.integers(0, n, n)
        coef = np.zeros(len(features))
        coef[cols] = _nnls(fit.features[rows][:, cols], fit.times[rows])
        vectors.append(tuple(float(c) for c in coef))
    return tuple(sorted(vectors, key=fit.mean_time))


def _missing_attr(name: str, s: StepSample) -> str:
    needs = {"draft": ("batch", "k", "ctx"), "verify": ("tokens", "ctx"),
             "prefill": ("tokens", "pairs", "ctx"), "draft_prefill": ("tokens", "pairs", "ctx"),
             "comm": ("nbytes",), "broadcast": ("nbytes",), "reject": ("positions",)}.get(name, ())
    gone = [a for a in needs if math.isnan(_tokens(s) if a == "tokens" else getattr(s, a))]
    return ", ".join(gone) or "an attribute"


def check_k(samples: list[StepSample]) -> None:
    """A drafting or a verify pass (not one mixed with prompt tokens) with more draft tokens a
    request than a scenario's k may be is a corrupt trace (its features would leave any profile's
    ranges, and the per-token rate's bisection would sum that many powers): refused, naming where
    the first came from."""
    too_many = [s for s in samples if s.kind in ("draft", "verify") and not s.mixed and s.k > MAX_K]
    if too_many:
        s = too_many[0]
        where = f" at {s.source}" if s.source else ""
        raise TraceError("traces", f"{len(too_many)} {s.kind} samples have more than {MAX_K} draft tokens a "
                         f"request (e.g. k={s.k:g}{where})",
                         f"check the k= or proposed_len counts the trace records: psdsim simulates k up to "
                         f"{MAX_K}")


def acceptance_stats(samples: list[StepSample]) -> dict[str, float]:
    """Acceptance where verify samples carry it: VSR (accepted / proposed draft tokens), mean
    accepted per verified request, and the per-token acceptance rate a that gives that mean under
    the simulator's model (i.i.d. positions, accepted = leading successes capped at k):
    a + a^2 + ... + a^k = mean accepted. Empty when the trace has no acceptance counts or no
    drafts (k = 0). A step that accepted more drafts than it proposed is a corrupt trace: refused."""
    rows = [s for s in samples if s.kind == "verify" and not math.isnan(s.accepted)
            and s.batch > 0 and not math.isnan(s.k) and s.k > 0]
    if not rows:
        return {}
    impossible = [s for s in rows if not 0 <= s.accepted <= s.batch * s.k * (1 + 1e-9)]  # k may be a ratio
    if impossible:
        s = impossible[0]
        raise TraceError("traces", f"{len(impossible)} verify steps accepted more drafts than they proposed, "
                         f"or fewer than none (e.g. accepted={s.accepted:g} at batch={s.batch:g}, k={s.k:g})",
                         "check the accepted= and k= counts the trace records")
    check_k(rows)
    accepted = sum(s.accepted for s in rows)
    proposed = sum(s.batch * s.k for s in rows)
    requests = sum(s.batch for s in rows)
    k = Counter(round(s.k) for s in rows).most_common(1)[0][0]
    mean = accepted / requests
    out = {"steps": float(len(rows)), "k": float(k), "vsr": accepted / proposed,
           "mean_accepted": mean}
    if k >= 1 and 0 < mean < k:
        out["per_token"] = alpha_for_accepted(mean, k)
    return out

