"""The stages ``answer()`` runs after fusion, each a named function over one ``AnswerState``.

``STAGES`` is their order (the order matters: dedup before the sensitive check, which sees what
is shown; the decision reads the hits before expansion and compression change their text).
``run`` is the one wrapper: it skips a stage its settings leave off, times it, and files the
trace record it returns under its name (its time in ``timings_ms`` as ``<name>_ms``). ``Window``
is the one window policy: how many fused candidates each stage reads.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from . import signals
from .answer_types import Hit
from .candidates import Candidates
from .context import build_context, citation, url_for
from .decide import absence, answerability, confidence, decide
from .names import missing
from .signals import TOP_DOCS
from .explain import explain_decision
from .postprocess import NearDuplicates
from .routing import SIGNALS_OF
from .scope import Scope
from .tokens import token_spans

# Fused candidates read beyond top_k, so that dedup and the sensitive drops can still fill the
# list, MMR has others to choose from and expansion's merged hits leave room.
MARGIN = 20


@dataclass(frozen=True)
class Window:
    """How many fused candidates each stage reads, from the caller's and the contract's top_k."""

    asked: int  # hits returned: the caller's top_k, else the contract's
    top_k: int  # hits ranked: at least the contract's top_k, which the decision always sees
    decided: int  # the contract's top_k: the hits the decision and the conflict check read
    read: int  # fused candidates whose rows are read
    dedup_keep: int | None  # dedup stops once it has these (None: a dropping rule may still remove some)
    kept: int  # items diversity keeps and hits built: room for expansion's merges
    scanned: int  # items the sensitive check sees
    pool: int  # MMR picks among the first ``pool`` fused: the contract's own window, however many are asked

    @classmethod
    def of(cls, contract, top_k: int | None, drops: bool) -> "Window":
        pp, own = contract.postprocess, contract.retrieve.top_k
        asked = top_k or own
        k = max(asked, own)
        margin = MARGIN if diverse(contract) or pp.expand.mode else 0
        return cls(asked=asked, top_k=k, decided=own,
                   read=k + MARGIN if pp.dedup.enabled or margin or drops else k,
                   dedup_keep=None if drops else k + margin, kept=k + (margin if pp.expand.mode else 0),
                   scanned=k + MARGIN, pool=own + MARGIN)


def diverse(contract) -> bool:
    div = contract.postprocess.diversity
    return div.mmr_lambda is not None or div.max_per_document is not None


@dataclass
class AnswerState:
    """What the stages hand on for one question's candidates: the fused list, then the window's
    items ((chunk id, score)), then hits and the decision; trace records and time per stage."""

    store: Any
    contract: Any
    cands: Candidates
    sc: Scope
    tags: Sequence[str]
    count_tokens: Callable[[str], int] | None
    explain: bool
    near: NearDuplicates | None
    weights: dict[str, float]
    ran: set[str]  # the retrievers a query of this question runs, however much was gathered
    fused: list[tuple[str, float]]
    sens: Any  # postprocess.sensitive's compiled rules (kbtool.sensitive.Rules)
    window: Window
    rows: dict | None  # chunk rows by id (given by calibrate, else read for the window)
    items: list[tuple[str, float]] = field(default_factory=list)
    dates: dict = field(default_factory=dict)  # document dates postprocess.freshness read
    dropped: list = field(default_factory=list)  # dedup's (dropped, kept) pairs
    redacted: dict = field(default_factory=dict)  # chunk id -> {field: redacted value}
    refused: tuple | None = None  # (category, word): the lexicon refuses the question
    hits: list[Hit] = field(default_factory=list)
    decided: list[Hit] = field(default_factory=list)  # the hits the decision reads (before expansion)
    best: Hit | None = None
    top: float | None = None  # what decide compares with the thresholds
    tier: str = ""
    thresholds: Any = None
    signals: dict = field(default_factory=dict)
    decision: str = "refuse"
    absence: str | None = None  # the evidence of absence decide saw (decide.absence)
    explanation: dict = field(default_factory=dict)
    conflicts: list | None = None
    context: str = ""
    records: dict[str, dict] = field(default_factory=dict)  # trace records by stage name
    spent: dict[str, float] = field(default_factory=dict)  # seconds by stage name (stages with a record)

    @property
    def extra(self) -> list[str]:
        """The further dense retrievers (dense:NAME) this question runs, in gathered order."""
        return [r for r in self.cands.scores if r not in ("dense", "bm25") and r in self.ran]


@dataclass(frozen=True)
class Stage:
    name: str
    fn: Callable[[AnswerState], dict | None]  # returns its trace record (None: it leaves none)
    on: Callable[[AnswerState], bool] = lambda st: True


def run(stage: Stage, st: AnswerState) -> None:
    """Run one stage if on; file its trace record and its time under its name."""
    if not stage.on(st):
        return
    t0 = time.perf_counter()
    record = stage.fn(st)
    if record is not None:
        st.records.setdefault(stage.name, {}).update(record)
        st.spent[stage.name] = st.spent.get(stage.name, 0.0) + time.perf_counter() - t0


# ---- the stages, in pipeline order ---------------------------------------------------------------
def rerank(st: AnswerState) -> dict:
    """Reorder the fused top_n (query.rerank)."""
    from . import rerank as rerank_mod

    rows = st.rows
    st.fused, record = rerank_mod.apply(
        st.store, st.contract.postprocess.rerank, st.cands.processed.text, st.fused,
        lambda ids: rows if rows is not None and all(c in rows for c in ids) else st.store.chunks_by_id(ids),
        st.cands.rerank_cache)
    return record


def freshness_decay(st: AnswerState) -> dict:
    """postprocess.freshness: every candidate's document date, a time decay before dedup."""
    from . import freshness

    fresh = st.contract.postprocess.freshness
    # a chunk id is "<doc_id>#<ordinal>" (kbtool.chunk): the documents before any row is read
    st.dates = freshness.document_dates(st.store, {c.rpartition("#")[0] for c, _ in st.fused}, fresh.date_fields)
    st.fused, decay = freshness.decay(st.fused, lambda c: c.rpartition("#")[0], st.dates, fresh)
    return {"decay": decay}


def read_window(st: AnswerState) -> None:
    """The window's rows; a candidate without one is dropped (never a ghost: the catalog is the truth)."""
    items = st.fused[: st.window.read]
    if st.rows is None:
        st.rows = st.store.chunks_by_id([c for c, _ in items])
    st.items = [(c, s) for c, s in items if c in st.rows]


def dedup(st: AnswerState) -> None:
    similarity, rows = st.contract.postprocess.dedup.similarity, st.rows
    if st.near is None or st.near.similarity != similarity:
        st.near = NearDuplicates([rows[c]["text"] for c, _ in st.items], similarity)
    st.items, st.dropped = st.near.dedup(st.items, lambda item: rows[item[0]]["text"], keep=st.window.dedup_keep)


def sensitive(st: AnswerState) -> dict:
    """postprocess.sensitive, before hits and the context: drop or redact, record counts only."""
    from .. import sensitive as sensitive_mod

    st.items, st.redacted, record, st.refused = sensitive_mod.apply(
        st.sens, st.cands.processed.raw, st.items[: st.window.scanned], st.rows, source=_sources(st))
    return record


def _sources(st: AnswerState):
    """(doc id, start, length) -> the document's text around that span and where the span starts in
    it (``Store.source_window``): the source span a hit is checked against."""
    return st.store.source_window


def diversity(st: AnswerState) -> dict:
    """postprocess.diversity: MMR over the chunk vectors, a per-document cap."""
    from .postprocess import diversify

    div, rows = st.contract.postprocess.diversity, st.rows
    if div.mmr_lambda is not None:
        _read_vectors(st.store, st.cands, st.items)
    # MMR's pool: the items among the contract's own window, however many hits the caller asks
    # for (fused order survives dedup and sensitive: a prefix)
    first = {c for c, _ in st.fused[: st.window.pool]}
    pool = next((i for i, (c, _) in enumerate(st.items) if c not in first), len(st.items))
    st.items, record = diversify(st.items, st.cands.vectors, lambda c: rows[c]["doc_id"], mmr_lambda=div.mmr_lambda,
                                 max_per_document=div.max_per_document, keep=st.window.kept, pool=pool)
    return record


def freshness_conflicts(st: AnswerState) -> dict:
    """postprocess.freshness: conflicts among the hits the decision reads (newer first if preferred)."""
    from . import freshness

    fresh, rows = st.contract.postprocess.freshness, st.rows
    seen = st.items[: st.window.decided]
    _read_vectors(st.store, st.cands, seen)
    dates = st.dates or freshness.document_dates(st.store, {rows[c]["doc_id"] for c, _ in seen}, fresh.date_fields)
    view = {c: {**rows[c], **st.redacted.get(c, {})} for c, _ in seen}  # facts of the texts as shown
    seen, st.conflicts, record = freshness.conflicts(seen, view, st.cands.vectors, dates, fresh)
    st.items = seen + st.items[len(seen):]
    return record


def hits(st: AnswerState) -> None:
    """The window's items as hits, and the best of the contract's top_k: the decision looks at
    those whatever the caller asked for (eval asks for 100), so the same question gets the same
    decision from query, eval and calibrate."""
    pos = {c: i for i, c in enumerate(st.cands.ids)}
    extra = st.extra
    for cid, score in st.items[: st.window.kept]:
        st.hits.append(_hit(st, cid, score, pos[cid], len(st.hits) + 1, extra))
    st.decided = st.hits[: st.window.decided]
    st.best = max(st.decided, key=lambda h: (h.confidence, -h.rank), default=None)
    st.top = st.best.confidence if st.best else None


def _hit(st: AnswerState, cid: str, score: float, i: int, rank: int, extra: list[str]) -> Hit:
    """One hit: its row (as redacted), its scores from the retrievers the question runs, its link."""
    cands, ran, store = st.cands, st.ran, st.store
    row = st.rows[cid]
    row = {**row, **st.redacted[cid]} if cid in st.redacted else row  # postprocess.sensitive's redactions
    cos = None if "dense" not in ran or math.isnan(cands.dense[i]) else float(cands.dense[i])
    raw = None if "bm25" not in ran or math.isnan(cands.bm25[i]) else float(cands.bm25[i])
    cov = None if raw is None or cands.bm25_bound <= 0 else min(1.0, raw / cands.bm25_bound)
    others = {r: float(cands.scores[r][i]) for r in extra if not math.isnan(cands.scores[r][i])}
    hit = Hit(
        rank=rank, chunk_id=cid, doc_id=row["doc_id"], title=row["title"],
        section_path=row["section_path"], page=row["page"], filetype=row["filetype"],
        char_start=row["char_start"], char_end=row["char_end"], text=row["text"], score=round(score, 6),
        confidence=round(confidence({"dense": cos, "bm25": cov, **others}, st.weights), 4),
        dense_score=None if cos is None else round(cos, 6),
        dense_rank=cands.dense_rank.get(cid) if "dense" in ran else None,
        bm25_score=None if raw is None else round(raw, 6),
        bm25_coverage=None if cov is None else round(cov, 4),
        bm25_rank=cands.bm25_rank.get(cid) if "bm25" in ran else None,
        retriever_scores={r: round(v, 6) for r, v in others.items()} or None,
        rerank_score=st.records.get("rerank", {}).get("scores", {}).get(cid),
        line_start=row.get("line_start"), line_end=row.get("line_end"), anchor=row.get("anchor"),
        line_source=json.loads(row["line_source"]) if row.get("line_source") else None,
    )
    prefix, base, site = store.published(row.get("root"))
    if not base and not st.contract.context.base_url:  # none given: a Sphinx project's html_baseurl
        prefix, base, site = store.published(row.get("root"), row["doc_id"])
    hit.url = (url_for(row["doc_id"][len(prefix):], hit.anchor, base, site) if base
               else url_for(row["doc_id"], hit.anchor, st.contract.context.base_url))
    hit.citation = citation(hit)
    return hit


def expand(st: AnswerState) -> dict:
    """postprocess.expand, after diversity; the decision read the hits' own chunks."""
    from .expand import expand as grow

    sens, store = st.sens, st.store
    own = {h.chunk_id: replace(h) for h in st.hits}  # each hit as checked by postprocess.sensitive
    allowed = st.sc.allowed
    if sens.drops:  # never grow over a chunk the rules drop (a span holding one goes back to the hit's own chunk)
        ids = [c["chunk_id"] for d in dict.fromkeys(h.doc_id for h in st.hits) for c in store.catalog.chunk_spans(d)]
        bad = {c for c, r in store.chunks_by_id(ids).items() if sens.scan(r["text"])[1] is not None}
        if bad:
            allowed = (set(ids) if allowed is None else set(allowed)) - bad
    st.hits, record = grow(st.hits, store, st.contract.postprocess.expand, allowed=allowed, keep=st.window.asked)
    if sens.active:  # a span's other chunks were never scanned: scan what expansion returns
        source = _sources(st)
        for i, h in enumerate(st.hits):
            text, drop, counts = sens.scan(h.text, *source(h.doc_id, h.char_start, len(h.text)))
            if drop:  # a dropping category in the span: the hit's own chunk instead, at the span's rank
                st.hits[i] = replace(own.get(h.chunk_id, h), rank=h.rank)
            elif counts:
                st.hits[i].text = text
                counted = st.records["sensitive"]["redacted"]
                for k, n in counts.items():
                    counted[k] = counted.get(k, 0) + n
    return record


def decision(st: AnswerState) -> None:
    """The hits asked for; the signals of the hits the decision reads, and the decision."""
    contract, cands = st.contract, st.cands
    st.hits = st.hits[: st.window.asked]
    st.tier, st.thresholds = contract.thresholds_for(set(cands.processed.types), set(st.tags))
    # The signals a query of this question sees: without BM25 among what it runs, none of BM25's
    # statistics, however much eval or calibrate gathered.
    seen = cands if "bm25" in st.ran else replace(cands, term_weights=None, names=None, bm25_bound=0.0)
    st.signals = signals.compute(seen, st.decided, st.best, lambda cid: _tokens(st.store, cands, st.rows, cid),
                                 st.weights)
    if contract.retrieve.fusion.method == "bm25":  # BM25 alone: the dense retrievers' signals read 0
        st.signals.update({f: 0.0 for f in SIGNALS_OF["dense"]})  # however the candidates were gathered
    if contract.decide.model is not None:
        st.top = answerability(st.signals, contract.decide.model)
    st.absence = absence(st.signals, contract.decide.refuse)
    st.decision = decide(st.top, st.thresholds, st.absence)


def explanation(st: AnswerState) -> None:
    """Why this decision (query.explain); a question the lexicon refuses: no hits, its message."""
    model = st.contract.decide.model
    top_docs = {h.doc_id for h in st.decided[:TOP_DOCS]}
    gone = missing(st.cands.names, top_docs, st.contract.decide.refuse.named)
    st.explanation = explain_decision(st.store, st.cands, st.best, st.decision, st.thresholds, st.sc, st.explain,
                                      value=st.top, name="confidence" if model is None else "P(answerable)",
                                      absence=st.absence, gone=gone, gate=st.sens.scan if st.sens.active else None,
                                      tier=st.tier if st.contract.decide.tiers and st.tier else None)
    if st.sc.warnings:
        st.explanation["filter_warnings"] = list(st.sc.warnings)
    if st.explanation.get("suggestions") and st.sens.active:  # index terms the rules would hide are not suggested
        from ..sensitive import safe_notes

        st.explanation["suggestions"] = safe_notes(st.sens, st.explanation["suggestions"])
    if st.refused is not None:
        cat, word = st.refused
        st.decision, st.hits = "refuse", []
        st.explanation = {"best": None, "sensitive": cat.name, "message": (
            f"the question touches the sensitive category {cat.name!r}"
            + (f" ({word!r})" if cat.show_match else "") + f" (postprocess.sensitive.lexicon): {cat.message}")}


def compress(st: AnswerState) -> dict:
    """postprocess.compress, after expand, on the hits returned; the decision read their own chunks."""
    from .compress import compress as shorten

    st.hits, record = shorten(st.hits, st.cands, st.store.analyzer, st.contract.postprocess.compress,
                              st.count_tokens, token_spans(st.store))
    return record


def shown_conflicts(st: AnswerState) -> None:
    """postprocess.freshness's conflicts between results returned (a cut hit: not shown)."""
    cover = dict(st.records.get("expand", {}).get("merged", ()))  # a hit expansion merged: the result whose span holds it
    moved = [{**c, "newer": cover.get(c["newer"], c["newer"]), "older": cover.get(c["older"], c["older"])}
             for c in st.conflicts]
    shown = {h.chunk_id for h in st.hits}
    st.conflicts = [c for c in moved if c["newer"] in shown and c["older"] in shown]


def context(st: AnswerState) -> None:
    st.context, _ = build_context(st.hits, st.decision, st.contract.context, st.count_tokens, conflicts=st.conflicts)
    if st.refused is not None:
        st.context = st.refused[0].message.rstrip("\n") + "\n"


def _pp(st: AnswerState):
    return st.contract.postprocess


STAGES = (
    Stage("rerank", rerank, lambda st: _pp(st).rerank.backend != "none"),
    Stage("freshness", freshness_decay, lambda st: _pp(st).freshness.half_life_days is not None),
    Stage("window", read_window),
    Stage("dedup", dedup, lambda st: _pp(st).dedup.enabled),
    Stage("sensitive", sensitive, lambda st: st.sens.active),
    Stage("diversity", diversity, lambda st: diverse(st.contract)),
    Stage("freshness", freshness_conflicts, lambda st: _pp(st).freshness.prefer is not None),
    Stage("hits", hits),
    Stage("expand", expand, lambda st: bool(_pp(st).expand.mode)),
    Stage("decide", decision),
    Stage("explain", explanation),
    Stage("compress", compress, lambda st: bool(_pp(st).compress.mode)),
    Stage("conflicts", shown_conflicts, lambda st: st.conflicts is not None),
    Stage("context", context, lambda st: st.count_tokens is not None),
)


# ---- helpers -----------------------------------------------------------------------------------
def _read_vectors(store, cands: Candidates, items) -> None:
    """The chunk vectors of ``items`` ((chunk id, score)) into ``cands.vectors``, those it lacks
    read once from the store (postprocess.diversity's MMR, postprocess.freshness's conflicts)."""
    missing = [c for c, _ in items if c not in cands.vectors]
    if missing:
        got = store.chunk_vectors(missing)
        cands.vectors.update({c: got.get(c) for c in missing})


def _tokens(store, cands: Candidates, rows: dict, chunk_id: str) -> frozenset:
    """A hit's analysed tokens as BM25 indexed them (its prefix and text), cached on the candidates."""
    got = cands.tokens.get(chunk_id)
    if got is None:
        from ..document import embed_text

        row = rows[chunk_id]
        got = cands.tokens[chunk_id] = frozenset(store.analyzer(embed_text(row.get("prefix") or "", row["text"])))
    return got
