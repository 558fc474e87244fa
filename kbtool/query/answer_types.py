"""The one result object of the query pipeline: ``Answer`` and its ``Hit`` list (``query --json``,
``--context``, eval, calibrate, serve and a Python user all read it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .preprocess import Processed


@dataclass
class Hit:
    rank: int
    chunk_id: str
    doc_id: str
    title: str
    section_path: str
    page: int | None
    filetype: str
    char_start: int
    char_end: int
    text: str
    score: float
    confidence: float
    dense_score: float | None = None
    dense_rank: int | None = None
    bm25_score: float | None = None
    bm25_coverage: float | None = None
    bm25_rank: int | None = None
    # further dense retrievers (dense:NAME) -> cosine, for the retrievers the question ran
    retriever_scores: dict | None = None
    rerank_score: float | None = None  # postprocess.rerank's score of this hit (None: not reranked)
    line_start: int | None = None
    line_end: int | None = None
    line_source: list | None = None  # included files its text came from: [{"path", "lines": [first, last]}]
    anchor: str | None = None
    url: str = ""  # the page (and section) it is published at: its source's base URL, else context.base_url
    citation: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Answer:
    """The one result object: hits with per-retriever scores, confidence, decision, explanation,
    context block and trace."""

    question: str
    processed: Processed
    weights: dict[str, float]
    hits: list[Hit]
    decision: str
    confidence: float | None
    tier: str
    thresholds: dict[str, float]
    explanation: dict
    context: str
    method: str
    filters: list[str] = field(default_factory=list)
    trace: dict = field(default_factory=dict)
    signals: dict = field(default_factory=dict)  # answerability signals (query.signals), what decide saw
    conflicts: list | None = None  # postprocess.freshness.prefer set: sources that differ (query.freshness)
    rule: dict | None = None  # the retrieve.rules entry that fused it ({index, when, bm25_coverage}); None: fusion.weights

    def to_dict(self, with_trace: bool = False) -> dict:
        out = {
            "question": self.question, "processed": self.processed.to_dict(), "method": self.method,
            "weights": self.weights, "rule": self.rule, "decision": self.decision, "confidence": self.confidence,
            "tier": self.tier, "thresholds": self.thresholds, "explanation": self.explanation,
            "filters": self.filters, "signals": self.signals, "hits": [h.to_dict() for h in self.hits],
            "context": self.context,
        }
        if self.conflicts is not None:  # only with the stage on: off, the JSON is what it was
            out["conflicts"] = self.conflicts
        if with_trace:
            out["trace"] = self.trace
        return out
