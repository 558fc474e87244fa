"""The query pipeline: contract -> preprocess -> candidates -> fuse -> post-process -> decide -> Answer.

``retrieve(store, contract, question)`` is the one code path behind ``kbtool query``, ``eval``
and ``calibrate``, and what a Python user calls:

    from kbtool import Store, load_contract, retrieve
    answer = retrieve(Store.open(".kb"), load_contract(), "How do I fix TW-E5120?")
    answer.decision, answer.hits[0].doc_id, answer.context
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from .answer_types import Answer, Hit
from .candidates import Candidates, Gatherer
from .context import url_for, build_context, citation
from . import signals
from .decide import answerability, confidence, decide
from .explain import explain_decision
from .fusion import fuse
from .postprocess import NearDuplicates
from .preprocess import preprocess
from .routing import SIGNALS_OF, needed_retrievers, store_retrievers
from .scope import Scope, scope
from .trace import top_list, write_trace


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
    explanation = explain_decision(store, cands, best_hit, decision, th, sc, explain, value=top,
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
        "candidates": {r: top_list(cands, r) for r in ("dense", "bm25", *extra) if r in cands.ranks or r in ("dense", "bm25")},
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

