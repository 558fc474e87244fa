"""Relevance units: what a ranked list of hits is scored on against a question's labels.

At the document level a hit counts for its document (at the rank of the document's first
chunk). At the chunk level each labelled entry (a document plus its evidence text or section)
is one unit, credited at the first chunk that holds it. ``units(hits, question, level, matcher)``
gives ``(ranking, unit scores, qrels)`` for ``kbtool.evaluation.metrics.score``; eval and
calibrate both score through it.
"""

from __future__ import annotations

from .questions import Question, contains_evidence, evidence_regex


def level_of(q: Question, level: str) -> str:
    """``auto``: chunk level when the question's labels give evidence or a section, else doc."""
    if level != "auto":
        return level
    return "chunk" if any(r.evidence or r.section for r in q.relevant) else "doc"


def units(hits, q: Question, level: str, matcher: "EvidenceMatcher"):
    """(ranking of unit ids, their scores, qrels) at ``level`` ('doc' or 'chunk')."""
    return doc_units(hits, q) if level == "doc" else chunk_units(hits, q, matcher)


def doc_units(hits, q: Question):
    """Collapse chunks to documents at the rank of each document's first chunk."""
    ranking, scores, seen = [], [], set()
    for h in hits:
        if h.doc_id not in seen:
            seen.add(h.doc_id)
            ranking.append(h.doc_id)
            scores.append(h.score)
    qrels: dict[str, float] = {}
    for r in q.relevant:
        qrels[r.doc] = max(qrels.get(r.doc, 0.0), r.grade)
    return ranking, scores, qrels


def chunk_units(hits, q: Question, matcher: "EvidenceMatcher"):
    """Each relevant entry is one unit, credited at the first chunk that holds it. A chunk that
    holds several entries credits each of them, at consecutive ranks."""
    items = [(f"{r.doc}::{n}", r) for n, r in enumerate(q.relevant)]
    qrels = {uid: r.grade for uid, r in items}
    ranking, scores, matched = [], [], set()
    for h in hits:
        found = [uid for uid, r in items if uid not in matched and r.doc == h.doc_id and matcher.matches(h, r)]
        matched.update(found)
        for unit in found or [h.chunk_id]:
            ranking.append(unit)
            scores.append(h.score)
    return ranking, scores, qrels


class EvidenceMatcher:
    """A chunk holds a piece of evidence when it contains it, or its span covers most of it."""

    def __init__(self, store):
        self.store = store
        self._spans: dict[tuple[str, str], tuple[int, int] | None] = {}

    def span(self, doc: str, evidence: str) -> tuple[int, int] | None:
        key = (doc, evidence)
        if key not in self._spans:
            text = self.store.document_text(doc)
            pattern = evidence_regex(evidence)
            m = pattern.search(text) if text is not None and pattern else None
            self._spans[key] = m.span() if m else None
        return self._spans[key]

    def matches(self, hit, r) -> bool:
        if r.section and not contains_evidence(hit.section_path, r.section):
            return False
        if not r.evidence:
            return True
        if contains_evidence(f"{hit.section_path}\n{hit.text}", r.evidence):  # headings are indexed too
            return True
        span = self.span(r.doc, r.evidence)
        if span is None:
            return False
        overlap = min(span[1], hit.char_end) - max(span[0], hit.char_start)
        return overlap >= (span[1] - span[0]) / 2
