"""Confidence, decisions and explanations.

A hit's **confidence** is in [0, 1] and means the same for every question:

    confidence = w_dense * max(cosine, 0) + w_bm25 * bm25_coverage

where ``cosine`` is the embedding similarity of question and chunk, ``bm25_coverage`` is the
chunk's BM25 score divided by the score of a chunk as good as the best one on *every* query term
(a query term no chunk contains counts as a rare term: it lowers every chunk's coverage), and
the weights are the question's fusion weights (a single retriever uses its own part alone). It
never depends on ranks, so a threshold on it means the same across questions.
"""

from __future__ import annotations

import difflib
import math
import re

DECISIONS = ("answer", "low_confidence", "refuse")


def confidence(cosine: float | None, coverage: float | None, w_dense: float, w_bm25: float) -> float:
    parts, weights = [], []
    if cosine is not None and w_dense > 0:
        parts.append(min(1.0, max(0.0, cosine)))
        weights.append(w_dense)
    if coverage is not None and w_bm25 > 0:
        parts.append(min(1.0, max(0.0, coverage)))
        weights.append(w_bm25)
    if not parts:
        return 0.0
    return sum(p * w for p, w in zip(parts, weights)) / sum(weights)


def answerability(signals: dict[str, float], model) -> float:
    """P(answerable) from the answerability signals with the contract's model (``decide.model``):
    the logistic model's score, through its calibration map (Platt: a logistic of the score)."""
    z = model.intercept + sum(c * float(signals.get(f, 0.0)) for f, c in model.coefficients.items())
    z = model.calibration.slope * z + model.calibration.offset
    z = max(-60.0, min(60.0, z))
    return round(1.0 / (1.0 + math.exp(-z)), 4)


def decide(top_confidence: float | None, thresholds) -> str:
    if top_confidence is None or top_confidence < thresholds.low_confidence:
        return "refuse"
    if top_confidence < thresholds.answer:
        return "low_confidence"
    return "answer"


def missing_terms(store, processed, terms: list[str], allowed: set[str] | None) -> list[str]:
    """Exact identifiers and query terms that no (permitted) chunk contains."""
    out: list[str] = []
    for ident in processed.identifiers:
        if not store.any_chunk_contains(ident["text"], allowed):
            out.append(ident["text"])
    index = store.bm25()
    mask = index.mask(allowed) if allowed is not None else None
    covered = " ".join(out).lower()
    vocab = None
    for term in dict.fromkeys(terms):
        if term in covered or len(term) < 3 or index.has_term(term, mask):
            continue
        if len(term) >= 4:
            vocab = vocab if vocab is not None else index.vocabulary()
            # a word form of a permitted indexed word ('causes' beside 'cause') is not worth a mention
            if any(v.startswith(term[:4]) and v != term and index.has_term(v, mask) for v in vocab):
                continue
        out.append(term)
    return out


def suggestions(store, missing: list[str], allowed: set[str] | None, filters: list[str]) -> list[str]:
    """Close terms from the index vocabulary (only terms a permitted chunk holds), and a broader filter."""
    out: list[str] = []
    index = store.bm25()
    mask = index.mask(allowed) if allowed is not None else None
    vocab = index.vocabulary()
    for term in missing[:5]:
        word = term.lower()
        stem = re.match(r"\D*", word).group(0)
        if stem != word and len(stem) >= 2:
            # an identifier: its siblings share the part before the digits (zeta-9931 -> zeta-4410)
            pool = [v for v in vocab if v.startswith(stem) and v != stem]
            cutoff = 0.3
        else:
            pool = [v for v in vocab if v[:1] == word[:1] and abs(len(v) - len(word)) <= 3]
            cutoff = 0.75
        close = [c for c in difflib.get_close_matches(word, pool, n=6, cutoff=cutoff)
                 if c != word and index.has_term(c, mask)][:3]
        if close:
            out.append(f"no chunk contains {term!r}; the index has: {', '.join(close)}")
    for spec in filters:
        out.append(f"the filter {spec} narrows the search: try without it")
    return out
