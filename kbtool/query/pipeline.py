"""The query pipeline: contract -> preprocess -> candidates -> fuse -> post-process -> decide -> Answer.

``retrieve(store, contract, question)`` is the one code path behind ``kbtool query``, ``eval``
and ``calibrate``, and what a Python user calls:

    from kbtool import Store, load_contract, retrieve
    answer = retrieve(Store.open(".kb"), load_contract(), "How do I fix TW-E5120?")
    answer.decision, answer.hits[0].doc_id, answer.context
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from ..errors import AccessError, ContractError, InputError, UsageError
from .candidates import Candidates, Gatherer
from .context import url_for, build_context, citation
from . import signals
from .decide import answerability, confidence, decide, missing_terms, suggestions
from ..filters import parse_filter
from .fusion import fuse
from .postprocess import NearDuplicates
from .preprocess import Processed, preprocess


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

    def to_dict(self, with_trace: bool = False) -> dict:
        out = {
            "question": self.question, "processed": self.processed.to_dict(), "method": self.method,
            "weights": self.weights, "decision": self.decision, "confidence": self.confidence,
            "tier": self.tier, "thresholds": self.thresholds, "explanation": self.explanation,
            "filters": self.filters, "signals": self.signals, "hits": [h.to_dict() for h in self.hits],
            "context": self.context,
        }
        if self.conflicts is not None:  # only with the stage on: off, the JSON is what it was
            out["conflicts"] = self.conflicts
        if with_trace:
            out["trace"] = self.trace
        return out


# ---- scope: filters and access --------------------------------------------------------------
@dataclass
class Scope:
    """Which chunks a run may see: the contract's and the caller's filters, and access tags."""

    filters: list[str]
    allowed: set[str] | None  # chunk ids, None = every chunk
    allowed_docs: list[str] | None
    extra_dense: int = 0  # chunks of allowed documents the filters exclude
    warnings: list[str] = field(default_factory=list)  # a filter that matches no document, and why
    visible: set[str] | None = None  # chunk ids access permits (None: every chunk): BM25 statistics count these only


def access_tags(contract, principal: str | None, allow: Sequence[str] | None) -> set[str] | None:
    """Tags a caller may read; None means unrestricted."""
    acc = contract.access
    if principal is None and not allow:
        if acc.require_principal:
            raise AccessError("the contract requires a principal (access.require_principal): pass principal= or allow= (CLI: --principal NAME or --allow TAG)")
        return None
    tags = set(allow or [])
    if principal is not None:
        if principal not in acc.principals:
            known = ", ".join(sorted(acc.principals)) or "none defined"
            raise AccessError(f"unknown principal {principal!r} (access.principals: {known})")
        tags |= set(acc.principals[principal])
    return tags


def _visibility(contract, tags: set[str] | None) -> Callable[[dict], bool]:
    """Whether a chunk's metadata is visible to a caller holding ``tags`` (None: everything)."""
    key, untagged_visible = contract.access.key, contract.access.untagged == "visible"

    def visible(meta: dict) -> bool:
        if tags is None:
            return True
        have = {t.strip() for t in str(meta.get(key, "")).split(",") if t.strip()}
        return bool(have & tags) if have else untagged_visible

    return visible


def visible_documents(store, contract, principal: str | None = None,
                      allow: Sequence[str] | None = None) -> set[str] | None:
    """The documents a caller may see (None: every document). Access only, no filters: what lint,
    counts and fingerprints may speak of. A document without chunks is invisible to a restricted
    caller (its access tags live on its chunks)."""
    tags = access_tags(contract, principal, allow)
    if tags is None:
        return None
    visible = _visibility(contract, tags)
    return {doc_id for _, doc_id, meta in store.chunk_metadata() if visible(meta)}


# Status fields that describe every document, whoever may read it: a restricted caller gets None.
_WHOLE_STORE = ("documents_by_type", "chunk_tokens_avg", "chunk_tokens_max", "chunks_over_model_limit",
                "disk_bytes", "last_ingest")


def restricted_status(store, contract, principal: str | None = None, allow: Sequence[str] | None = None) -> dict:
    """``store.status()`` as a caller may see it: unrestricted, all of it; restricted (or required
    to be, ``access.require_principal``), documents and chunks it may read, ``access`` its tags,
    and None for what describes the whole store (types, token sizes, disk use, last ingest)."""
    tags = access_tags(contract, principal, allow)
    info = store.status()
    if tags is None:
        return info
    docs = visible_documents(store, contract, principal, allow) or set()
    info.update({k: None for k in _WHOLE_STORE})
    info.update(documents=len(docs), chunks=sum(1 for _, d, _ in store.chunk_metadata() if d in docs),
                access=sorted(tags))
    return info


def scope(store, contract, filters: Sequence[str] = (), principal: str | None = None,
          allow: Sequence[str] | None = None) -> Scope:
    specs = list(contract.retrieve.filters) + list(filters or [])
    try:
        parsed = [parse_filter(s) for s in specs]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fields = contract.data.metadata
    tags = access_tags(contract, principal, allow)
    visible = _visibility(contract, tags)
    if not parsed:
        known = set()
    elif tags is None:
        known = store.metadata_keys() | set(fields)
    else:  # a restricted caller learns no metadata key only forbidden documents carry
        known = set(fields) | {k for _, _, meta in store.chunk_metadata() if visible(meta) for k in meta}
        known.discard("index_hash")
    for f in parsed:
        if f.key not in known:
            raise InputError(f"unknown filter key {f.key!r}: known keys are {', '.join(sorted(known))}")
        if f.key in fields and not fields[f.key].filterable:
            raise ContractError(f"filter on {f.key!r}: data.metadata.{f.key}.filterable is false in the contract")
    if not parsed and tags is None:
        return Scope(specs, None, None)
    # Once per catalog generation and (filters, caller, access settings, field types): a server's
    # callers and an eval's questions share it, and the filtered dense search holds vectors by it.
    key = ("scope", tuple(specs), None if tags is None else frozenset(tags), contract.access.key,
           contract.access.untagged, json.dumps({k: v.model_dump(mode="json") for k, v in fields.items()}, sort_keys=True))
    return store.memo(key, lambda: _scope(store, specs, parsed, fields, visible, tags))


def _scope(store, specs, parsed, fields, visible, tags) -> Scope:
    allowed, docs, seen_chunks = set(), set(), set()
    doc_chunks: dict[str, int] = {}
    hit_by = [0] * len(parsed)  # visible chunks each filter matches on its own
    for doc_id, meta, ids in store.metadata_groups():  # chunks of one document with one metadata
        doc_chunks[doc_id] = doc_chunks.get(doc_id, 0) + len(ids)
        if not visible(meta):
            continue
        seen_chunks.update(ids)
        ok = [f.matches(meta, fields[f.key].type if f.key in fields else "str") for f in parsed]
        for i, matched in enumerate(ok):
            hit_by[i] += matched * len(ids)
        if all(ok):
            allowed.update(ids)
            docs.add(doc_id)
    warnings = []
    for f, n in zip(parsed, hit_by):
        if n == 0:  # rare: the values the key has, among the chunks this caller may see
            seen: dict[str, int] = {}
            for _, meta, ids in store.metadata_groups():
                if visible(meta) and f.key in meta:
                    seen[str(meta[f.key])] = seen.get(str(meta[f.key]), 0) + len(ids)
            warnings.append(_no_match(f, seen))
    # Chroma filters by document; chunks of those documents the filter leaves out (a page filter)
    # are dropped after the search, so the dense search must look that much deeper.
    extra = sum(doc_chunks[d] for d in docs) - len(allowed)
    return Scope(specs, allowed, sorted(docs), extra, warnings, None if tags is None else seen_chunks)


def _no_match(f, seen: dict[str, int]) -> str:
    """'filter lang=fr matches no document; lang has: 'en', 'zh'' (closest values first)."""
    import difflib

    wanted = f.values[0] if f.values else ""
    close = difflib.get_close_matches(wanted, list(seen), n=5, cutoff=0.0) if wanted else []
    close += [v for v, _ in sorted(seen.items(), key=lambda kv: -kv[1]) if v not in close]
    shown = ", ".join(repr(v) for v in close[:5])
    return (f"filter {f} matches no document; {f.key} has: {shown}" if shown
            else f"filter {f} matches no document; no document has a {f.key!r} value")


# ---- the pipeline ---------------------------------------------------------------------------
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
        groups = [types] if types is not None else [{t} for t in ("identifier", "cjk", "other")]
        used = {r for g in groups for r in contract.retriever_weights(g, available)}
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


def gather(store, contract, questions: Sequence[str], *, sc: Scope, embedder=None, depth: int | None = None,
           retrievers: tuple[str, ...] | None = None, progress=None) -> list[Candidates]:
    """Preprocess every question and gather its candidates (the expensive part). ``retrievers``:
    run these for every question (calibrate, eval's modes); None: each question runs what the
    contract fuses it with (a dense model no question weighs is never loaded)."""
    gatherer = Gatherer(store, embedder)
    wanted = None
    if retrievers is None:
        retrievers = needed_retrievers(contract, store)
        wanted = lambda p: needed_retrievers(contract, store, set(p.types))  # noqa: E731
    spans = _token_spans(store)
    processed = [preprocess(q, contract, spans) for q in questions]
    depth = max(depth or 0, contract.retrieve.candidates, contract.retrieve.top_k)
    return gatherer.gather(processed, retrievers=retrievers, depth=depth, allowed=sc.allowed,
                           allowed_docs=sc.allowed_docs, extra_dense=sc.extra_dense, fill_missing=contract.retrieve.fusion.fill_missing,
                           visible=sc.visible, wanted=wanted,
                           progress=progress)


def answer(store, contract, cands: Candidates, *, sc: Scope, tags: Sequence[str] = (), count_tokens=None,
           top_k: int | None = None, explain: bool = True, rows: dict | None = None,
           with_trace: bool = True, near: NearDuplicates | None = None) -> Answer:
    """Fuse, post-process and decide for one question's candidates (cheap, pure but for row reads).

    ``rows``: chunk rows by id already read for these candidates (``store.chunks_by_id(cands.ids)``),
    for a caller answering the same candidates under many contracts (calibrate); None reads them.
    ``with_trace=False`` leaves ``Answer.trace`` empty (calibrate reads hits and confidence only).
    ``near``: the near-duplicate relation of these candidates' texts, computed once (calibrate);
    None computes it over the window, as a query does."""
    t0 = time.perf_counter()
    p = cands.processed
    fusion = contract.retrieve.fusion
    method = fusion.method
    types = set(p.types)
    available = store_retrievers(store)
    weights = contract.retriever_weights(types, available)
    # The candidates of the retrievers this question is fused with (calibrate gathers every
    # retriever for every question; a query only those it weighs: both fuse the same pool).
    pool = [i for i, c in enumerate(cands.ids) if any(c in cands.ranks.get(r, ()) for r in weights)]
    if len(pool) == len(cands.ids):
        fused = fuse(cands.ids, cands.scores, weights, method=method, normalization=fusion.normalization,
                     rrf_k=fusion.rrf_k)
    else:
        fused = fuse([cands.ids[i] for i in pool], {r: a[pool] for r, a in cands.scores.items()}, weights,
                     method=method, normalization=fusion.normalization, rrf_k=fusion.rrf_k)
    reranked: dict = {}
    if contract.postprocess.rerank.backend != "none":  # reorder the fused top_n (query.rerank)
        from . import rerank

        fused, reranked = rerank.apply(
            store, contract.postprocess.rerank, p.text, fused,
            lambda ids: rows if rows is not None and all(c in rows for c in ids) else store.chunks_by_id(ids),
            cands.rerank_cache)
    fresh, freshness, dates = contract.postprocess.freshness, {}, {}
    if fresh.active:  # postprocess.freshness: the documents' dates; a time decay before dedup
        from . import freshness as fresh_stage

        t_f = time.perf_counter()
        if fresh.half_life_days is not None:  # every candidate's date (the conflicts below need only the top_k's)
            # a chunk id is "<doc_id>#<ordinal>" (kbtool.chunk): the documents before any row is read
            dates = fresh_stage.document_dates(store, {c.rpartition("#")[0] for c, _ in fused}, fresh.date_fields)
            fused, freshness["decay"] = fresh_stage.decay(fused, lambda c: c.rpartition("#")[0], dates, fresh)
        freshness_ms = time.perf_counter() - t_f
    asked = top_k or contract.retrieve.top_k
    top_k = max(asked, contract.retrieve.top_k)  # the decision always sees the contract's top_k
    pos = {c: i for i, c in enumerate(cands.ids)}
    # Read rows for a margin beyond top_k so dedup can still fill the list.
    div = contract.postprocess.diversity
    diverse = div.mmr_lambda is not None or div.max_per_document is not None
    grow = contract.postprocess.expand  # postprocess.expand: merged hits leave room, so read a margin
    sens = contract.postprocess.sensitive.rules()  # postprocess.sensitive (kbtool.sensitive)
    margin = 20 if diverse or grow.mode else 0
    window = (fused[: top_k + 20] if contract.postprocess.dedup.enabled or margin or sens.drops
              else fused[:top_k])
    rows = store.chunks_by_id([c for c, _ in window]) if rows is None else rows
    window = [(c, s) for c, s in window if c in rows]  # never a ghost: the catalog is the truth
    dropped = []
    if contract.postprocess.dedup.enabled:
        similarity = contract.postprocess.dedup.similarity
        if near is None or near.similarity != similarity:
            near = NearDuplicates([rows[c]["text"] for c, _ in window], similarity)
        window, dropped = near.dedup(window, lambda item: rows[item[0]]["text"],
                                     keep=None if sens.drops else top_k + margin)
    redacted, sensitive, refused = {}, None, None
    if sens.active:  # after dedup, before hits and the context: drop or redact, record counts only
        from .. import sensitive as sensitive_stage

        t_s = time.perf_counter()
        window, redacted, sensitive, refused = sensitive_stage.apply(sens, p.raw, window[:top_k + 20], rows)
        sensitive_ms = round((time.perf_counter() - t_s) * 1000, 3)  # in timings_ms only: the record stays equal
    diversified: dict = {}
    if diverse:  # postprocess.diversity: MMR over the chunk vectors, a per-document cap
        from .postprocess import diversify

        t_div = time.perf_counter()
        if div.mmr_lambda is not None:
            _read_vectors(store, cands, window)
        # MMR's pool: the window's items among the contract's own window (top_k + 20 fused), however
        # many hits the caller asks for (fused order survives dedup and sensitive: a prefix)
        first = {c for c, _ in fused[: contract.retrieve.top_k + 20]}
        pool = next((i for i, (c, _) in enumerate(window) if c not in first), len(window))
        window, diversified = diversify(window, cands.vectors, lambda c: rows[c]["doc_id"], mmr_lambda=div.mmr_lambda,
                                        max_per_document=div.max_per_document, keep=top_k + (margin if grow.mode else 0),
                                        pool=pool)
        diversity_ms = round((time.perf_counter() - t_div) * 1000, 2)  # in timings_ms only: the record stays equal
    conflicts = None
    if fresh.prefer is not None:  # postprocess.freshness: conflicts among the hits the decision reads
        t_f = time.perf_counter()
        seen = window[: contract.retrieve.top_k]
        _read_vectors(store, cands, seen)
        if not dates:  # no decay above: the dates of these hits' documents only
            dates = fresh_stage.document_dates(store, {rows[c]["doc_id"] for c, _ in seen}, fresh.date_fields)
        view = {c: {**rows[c], **redacted.get(c, {})} for c, _ in seen}  # facts of the texts as shown
        seen, conflicts, found = fresh_stage.conflicts(seen, view, cands.vectors, dates, fresh)
        window = seen + window[len(seen):]
        freshness.update(found)
        freshness_ms += time.perf_counter() - t_f
    hits = []
    extra = [r for r in cands.scores if r not in ("dense", "bm25")]
    # A hit reports the retrievers a query of this question runs, however much was gathered
    # (calibrate and eval gather every retriever): the same hits from query, eval and calibrate.
    ran = set(needed_retrievers(contract, store, types, available))
    extra = [r for r in extra if r in ran]
    for cid, score in window[: top_k + (margin if grow.mode else 0)]:
        row, i = rows[cid], pos[cid]
        row = {**row, **redacted[cid]} if cid in redacted else row  # postprocess.sensitive's redactions
        cos = None if "dense" not in ran or math.isnan(cands.dense[i]) else float(cands.dense[i])
        raw = None if "bm25" not in ran or math.isnan(cands.bm25[i]) else float(cands.bm25[i])
        cov = None if raw is None or cands.bm25_bound <= 0 else min(1.0, raw / cands.bm25_bound)
        others = {r: float(cands.scores[r][i]) for r in extra if not math.isnan(cands.scores[r][i])}
        hits.append(Hit(
            rank=len(hits) + 1, chunk_id=cid, doc_id=row["doc_id"], title=row["title"],
            section_path=row["section_path"], page=row["page"], filetype=row["filetype"],
            char_start=row["char_start"], char_end=row["char_end"], text=row["text"], score=round(score, 6),
            confidence=round(confidence({"dense": cos, "bm25": cov, **others}, weights), 4),
            dense_score=None if cos is None else round(cos, 6),
            dense_rank=cands.dense_rank.get(cid) if "dense" in ran else None,
            bm25_score=None if raw is None else round(raw, 6),
            bm25_coverage=None if cov is None else round(cov, 4),
            bm25_rank=cands.bm25_rank.get(cid) if "bm25" in ran else None,
            retriever_scores={r: round(v, 6) for r, v in others.items()} or None,
            rerank_score=reranked.get("scores", {}).get(cid),
            line_start=row.get("line_start"), line_end=row.get("line_end"), anchor=row.get("anchor"),
        ))
        prefix, base = store.published(row.get("root"))
        hits[-1].url = (url_for(row["doc_id"][len(prefix):], hits[-1].anchor, base) if base
                        else url_for(row["doc_id"], hits[-1].anchor, contract.context.base_url))
        hits[-1].citation = citation(hits[-1])
    # The decision looks at the contract's top_k hits whatever the caller asked for (eval asks for
    # 100): the same question gets the same decision from query, eval and calibrate.
    window = hits[: contract.retrieve.top_k]
    best_hit = max(window, key=lambda h: (h.confidence, -h.rank), default=None)
    top = best_hit.confidence if best_hit else None
    expanded: dict = {}
    if grow.mode:  # after diversity; the decision above read the hits' own chunks
        from .expand import expand

        t_exp = time.perf_counter()
        own = {h.chunk_id: replace(h) for h in hits}  # each hit as checked by postprocess.sensitive
        allowed = sc.allowed
        if sens.drops:  # never grow over a chunk the rules drop (a span holding one goes back to the hit's own chunk)
            ids = [c["chunk_id"] for d in dict.fromkeys(h.doc_id for h in hits) for c in store.catalog.chunk_spans(d)]
            rows_of = store.chunks_by_id(ids)
            bad = {c for c, r in rows_of.items() if sens.scan(r["text"])[1] is not None}
            if bad:
                allowed = (set(ids) if allowed is None else set(allowed)) - bad
        hits, expanded = expand(hits, store, grow, allowed=allowed, keep=asked)
        expand_ms = round((time.perf_counter() - t_exp) * 1000, 2)  # in timings_ms only
        if sens.active:  # a span's other chunks were never scanned: scan what expansion returns
            for i, h in enumerate(hits):
                text, drop, counts = sens.scan(h.text)
                if drop:  # a dropping category in the span: the hit's own chunk instead, at the span's rank
                    hits[i] = replace(own.get(h.chunk_id, h), rank=h.rank)
                elif counts:
                    hits[i].text = text
                    for k, n in counts.items():
                        sensitive["redacted"][k] = sensitive["redacted"].get(k, 0) + n
    hits = hits[:asked]
    tier, th = contract.thresholds_for(types, set(tags))
    # The signals a query of this question sees: without BM25 among what it runs, none of BM25's
    # statistics, however much eval or calibrate gathered.
    seen = cands if "bm25" in ran else replace(cands, term_weights=None, bm25_bound=0.0)
    sig = signals.compute(seen, window, best_hit, lambda cid: _tokens(store, cands, rows, cid), weights)
    if method == "bm25":  # BM25 alone: the dense retrievers' signals read 0 however the candidates were gathered
        sig.update({f: 0.0 for f in SIGNALS_OF["dense"]})
    model = contract.decide.model
    if model is not None:
        top = answerability(sig, model)
    decision = decide(top, th)
    explanation = _explain(store, cands, best_hit, decision, th, sc, explain, value=top,
                           name="confidence" if model is None else "P(answerable)")
    if sc.warnings:
        explanation["filter_warnings"] = list(sc.warnings)
    if explanation.get("suggestions") and sens.active:  # index terms the rules would hide are not suggested
        explanation["suggestions"] = sensitive_stage.safe_notes(sens, explanation["suggestions"])
    if refused is not None:  # a question of a category the lexicon refuses: no hits, its message
        cat, word = refused
        decision, hits = "refuse", []
        explanation = {"best": None, "sensitive": cat.name, "message": (
            f"the question touches the sensitive category {cat.name!r}"
            + (f" ({word!r})" if cat.show_match else "") + f" (postprocess.sensitive.lexicon): {cat.message}")}
    compressed: dict = {}
    if contract.postprocess.compress.mode:  # after expand, on the hits returned; the decision read their own chunks
        from .compress import compress

        t_c = time.perf_counter()
        hits, compressed = compress(hits, cands, store.analyzer, contract.postprocess.compress,
                                    count_tokens, _token_spans(store))
        compress_ms = round((time.perf_counter() - t_c) * 1000, 3)  # in timings_ms only: the record stays equal
    if conflicts is not None:  # those between results returned (a cut hit: not shown)
        cover = dict(expanded.get("merged", ()))  # a hit expansion merged: the result whose span holds it
        conflicts = [{**c, "newer": cover.get(c["newer"], c["newer"]), "older": cover.get(c["older"], c["older"])}
                     for c in conflicts]
        shown = {h.chunk_id for h in hits}
        conflicts = [c for c in conflicts if c["newer"] in shown and c["older"] in shown]
    context = ""
    if count_tokens is not None:
        context, _ = build_context(hits, decision, contract.context, count_tokens, conflicts=conflicts)
        if refused is not None:
            context = refused[0].message.rstrip("\n") + "\n"
    t_post = time.perf_counter() - t0
    trace = {} if not with_trace else {
        "candidates": {r: _top_list(cands, r) for r in ("dense", "bm25", *extra) if r in cands.ranks or r in ("dense", "bm25")},
        "fused": [[c, round(s, 6)] for c, s in fused[:20]],
        "dedup_dropped": [[d[0][0], k[0]] for d, k in ((x, x[1]) for x in dropped)],
        **({"rerank": reranked} if reranked else {}),
        **({"diversity": diversified} if diversified else {}),
        **({"expand": expanded} if expanded else {}),
        **({"sensitive": sensitive} if sensitive else {}),
        **({"compress": compressed} if compressed else {}),
        **({"freshness": freshness} if fresh.active else {}),
        "timings_ms": {**cands.timings, "fuse_decide_ms": round(t_post * 1000, 2),
                       **({"rerank_ms": reranked["ms"]} if reranked else {}),
                       **({"sensitive_ms": sensitive_ms} if sensitive else {}),
                       **({"diversity_ms": diversity_ms} if diverse else {}),
                       **({"expand_ms": expand_ms} if grow.mode else {}),
                       **({"freshness_ms": round(freshness_ms * 1000, 3)} if fresh.active else {}),
                       **({"compress_ms": compress_ms} if compressed else {})},
    }
    return Answer(
        question=p.raw, processed=p, weights={r: round(w, 4) for r, w in weights.items()},
        hits=hits, decision=decision, confidence=top, tier=tier,
        thresholds={"answer": th.answer, "low_confidence": th.low_confidence},
        explanation=explanation, context=context, method=method, filters=sc.filters, trace=trace,
        signals=sig, conflicts=conflicts,
    )


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


def rule_applied(contract, types_of: Sequence[Sequence[str]]) -> list[str]:
    """For each question's detected types, which rule fuses it: the ``when`` of the rule
    ``Contract.rule_for`` picks (the one choice ``weights_for`` also makes), or 'other'."""
    return [getattr(contract.rule_for(set(types)), "when", "other") for types in types_of]


def _top_list(cands: Candidates, which: str, n: int = 20) -> list:
    ranks, scores = cands.ranks.get(which, {}), cands.score(which)
    pos = {c: i for i, c in enumerate(cands.ids)}
    return [[c, round(float(scores[pos[c]]), 6)] for c, _ in sorted(ranks.items(), key=lambda x: x[1])[:n]]


def _explain(store, cands, best, decision, th, sc: Scope, explain: bool, *, value: float | None = None,
             name: str = "confidence") -> dict:
    """Why this decision: the value ``decide`` compared with the thresholds, and on a refusal or
    low confidence, the question's terms no permitted chunk holds and the nearest miss, cited.

    ``value`` is what ``decide`` compared with the thresholds (``Answer.confidence``: the
    answerability probability when the contract has a model, else the best hit's confidence);
    ``best.confidence`` is that hit's relevance (cosine / BM25 coverage mix). The message calls
    the first ``name`` ("P(answerable)" with a model, else "confidence") and the second
    "relevance"; every number in it is rounded by
    ``decide.shown`` against the thresholds, as the query table rounds them."""
    from .decide import never_mentions, shown, shown_threshold, word_embedder

    if value is None and best is not None:
        value = best.confidence
    limits = (th.answer, th.low_confidence)
    out: dict = {
        "best": None if best is None else {"rank": best.rank, "doc_id": best.doc_id, "citation": best.citation,
                                           "section_path": best.section_path, "confidence": best.confidence},
    }
    where = "" if best is None else best.citation or best.doc_id
    if decision == "answer":
        out["message"] = (f"{name} {shown(value, limits)} ≥ answer threshold {shown_threshold(th.answer)}"
                          + (f"; best: {where}" if where else ""))
        return out
    missing = None
    if explain and "bm25" in store_retrievers(store):
        missing = missing_terms(store, cands.processed, cands.query_terms, sc.allowed)
        out["missing_terms"] = missing
        out["suggestions"] = suggestions(store, missing, sc.allowed, sc.filters, word_embedder(store, cands.retrievers))
    parts = []
    if value is None:
        parts.append("no chunk matched" + (" (the filters and access allow none)" if sc.allowed == set() else ""))
    elif decision == "refuse":
        parts.append(f"{name} {shown(value, limits)} is below the refuse threshold {shown_threshold(th.low_confidence)}")
    else:
        parts.append(f"{name} {shown(value, limits)} is below the answer threshold {shown_threshold(th.answer)} "
                     f"(refuse below {shown_threshold(th.low_confidence)}): the answer may not be in these sources")
    if missing:
        parts.append(never_mentions(cands.processed.text, missing, filtered=bool(sc.filters)))
    if best is not None:
        label = "nearest miss" if decision == "refuse" else "best match"
        parts.append(f"{label}: {where} at relevance {shown(best.confidence, limits)}")
    out["message"] = "; ".join(parts)
    return out


def store_retrievers(store) -> tuple[str, ...]:
    """The retrievers of a store: ``dense``, ``bm25`` (once built), ``dense:NAME`` per added model."""
    dense = store.dense_retrievers()
    return (dense[0], *(["bm25"] if store.has_bm25() else []), *dense[1:])


def _token_spans(store):
    """Model word-piece spans, from the tokenizer alone (no torch)."""
    try:
        from ..embed import load_tokenizer

        tok = load_tokenizer(store.embedding_spec())
    except Exception:  # a model without a tokenizer file: no truncation
        return None

    def spans(text: str) -> list[tuple[int, int]]:
        return [s for s in tok.encode(text, add_special_tokens=False).offsets]

    return spans


def count_tokens_for(store) -> Callable[[str], int]:
    from ..embed import load_tokenizer

    tok = load_tokenizer(store.embedding_spec())
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def retrieve(store, contract=None, questions: str | Sequence[str] = (), *, filters: Sequence[str] = (),
             principal: str | None = None, allow: Sequence[str] | None = None, tags: Sequence[str] = (),
             embedder=None, top_k: int | None = None, progress=None, trace_path: str | Path | None = None):
    """Answer one question (returns an ``Answer``) or many (returns a list), as the contract says."""
    from ..contract import default_contract

    contract = contract or default_contract()
    single = isinstance(questions, str)
    qs = [questions] if single else list(questions)
    store.require_indexed()
    sc = scope(store, contract, filters, principal, allow)
    t0 = time.perf_counter()
    cands = gather(store, contract, qs, sc=sc, embedder=embedder, depth=top_k, progress=progress)
    counter = count_tokens_for(store)
    answers = [answer(store, contract, c, sc=sc, tags=tags, count_tokens=counter, top_k=top_k) for c in cands]
    path = trace_path or contract.trace.path
    if path:
        write_trace(path, answers, contract, time.perf_counter() - t0, caller={"principal": principal, "allow": list(allow or [])})
    return answers[0] if single else answers


def write_trace(path: str | Path, answers: list[Answer], contract, seconds: float, caller: dict | None = None) -> None:
    """Append one JSONL record per question (with who asked: the principal and permission tags)."""
    run_id = uuid.uuid4().hex[:12]
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            for a in answers:
                rec = {
                    "run_id": run_id, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "contract_version": contract.contract_version, **({"caller": caller} if caller else {}),
                    "question": a.question,
                    "processed": a.processed.to_dict(), "types": a.processed.types, "weights": a.weights,
                    "method": a.method, "filters": a.filters, **a.trace,
                    "hits": [[h.chunk_id, h.score, h.confidence] for h in a.hits],
                    "decision": a.decision, "confidence": a.confidence, "tier": a.tier, "signals": a.signals,
                    "total_ms": round(seconds * 1000 / max(1, len(answers)), 2),
                }
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise InputError(f"trace file {path}: cannot write ({exc.strerror})") from None
