"""Which retrievers a query runs: the store's, those the contract's fusion weighs, and the rule
that fuses a question of given types (and signals known before fusion: ``bm25_coverage``)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..contract.base import QUESTION_TYPES


# The signals (query.signals) each kind of retriever's candidates give a value; without it they
# read 0 ("dense" stands for every dense retriever: the signals read the question's main one).
SIGNALS_OF = {"dense": {"cosine", "dense_margin", "agreement"},
              "bm25": {"coverage", "absent_kb", "absent_top", "bm25_margin", "terms", "agreement"}}


def needed_retrievers(contract, store=None, types: set[str] | None = None, available=None) -> tuple[str, ...]:
    """The retrievers a query runs (for a question of detected ``types``; None: any question): those
    its fusion weighs, and for a dense mode BM25 too when the contract's model weighs its signals
    (local statistics, no model call). The BM25 mode never runs a dense retriever — BM25 answers
    without an embedding model — and decides on its own signals: ``answer`` reads the dense ones as 0
    whatever was gathered, as eval and calibrate do. Without ``store``: of ``dense`` and ``bm25``."""
    if available is None:  # ``available``: the store's retrievers, when the caller has them already
        available = store_retrievers(store) if store is not None else ("dense", "bm25")
    method = contract.retrieve.fusion.method
    if method in ("weighted", "rrf"):
        groups = [types] if types is not None else [{t} for t in QUESTION_TYPES]
        used = {r for g in groups for cov in coverages(contract) for r in contract.retriever_weights(g, available, cov)}
        if store is None or store.has_bm25():
            used.add("bm25")  # the signals of every question read BM25 (no model call)
        return tuple(r for r in available if r in used or (r == "bm25" and store is None))
    if method == "bm25":
        return ("bm25",)
    model = contract.decide.model
    used = {f for f, c in model.coefficients.items() if c} if model is not None else set()
    return tuple(r for r in available if r == method or (r == "bm25" and used & SIGNALS_OF["bm25"]))


def gathered_for(store, contracts) -> tuple[str, ...]:
    """The retrievers to gather for every question so that each contract's questions see what a
    query would (``answer`` fuses each over the retrievers it weighs): the union of what each runs."""
    used = {r for c in contracts for r in needed_retrievers(c, store)}
    return tuple(r for r in store_retrievers(store) if r in used)


def rule_applied(contract, types_of: Sequence[Sequence[str]], available=None) -> list[str]:
    """For each question's detected types, which type rule fuses it: the type of the rule
    ``Contract.rule_for`` picks when no signal is known (the one choice ``weights_for`` also makes),
    or 'other'; ``available``: the store's retrievers (a rule weighing a bundled one it lacks is
    skipped, as the pipeline skips it). Rules on signals (``bm25_coverage_below``) are not consulted."""
    return [getattr(contract.rule_for(set(types), available), "type", None) or "other" for types in types_of]


def bm25_coverage(cands) -> float | None:
    """The best BM25 coverage among a question's candidates: the best BM25 score over
    ``bm25_bound`` (the score of a chunk holding every query term at its best), in [0, 1]; what a
    rule's ``bm25_coverage_below`` reads. None when BM25 did not run (no index)."""
    if "bm25" not in cands.retrievers:
        return None
    scores = cands.bm25
    best = float(np.nanmax(scores)) if len(scores) and not np.isnan(scores).all() else 0.0
    if cands.bm25_bound <= 0 or not math.isfinite(best) or best <= 0:
        return 0.0
    return min(1.0, best / cands.bm25_bound)


def coverages(contract) -> tuple[float | None, ...]:
    """BM25 coverages under which every rule that can fuse a question is first: unknown, and each
    side of every ``bm25_coverage_below`` cut-off (what a question may be fused with, before its
    candidates are known)."""
    cuts = sorted({r.when.bm25_coverage_below for r in contract.retrieve.rules if r.signals})
    return (None, 0.0, *cuts) if cuts else (None,)


def store_retrievers(store) -> tuple[str, ...]:
    """The retrievers of a store: ``dense``, ``bm25`` (once built), ``dense:NAME`` per added model."""
    dense = store.dense_retrievers()
    return (dense[0], *(["bm25"] if store.has_bm25() else []), *dense[1:])
