"""The query pipeline: contract -> preprocess -> candidates -> fuse -> post-process -> decide -> Answer.

``retrieve(store, contract, question)`` is what ``kbtool query``, serve and a Python user call:

    from kbtool import Store, load_contract, retrieve
    answer = retrieve(Store.open(".kb"), load_contract(), "How do I fix TW-E5120?")
    answer.decision, answer.hits[0].doc_id, answer.context

Underneath, one ``Searcher`` runs scope (``query.scope``) -> ``gather`` (preprocess, candidates:
the expensive part) -> ``answer`` (fusion, then the stages of ``query.stages``) for ``retrieve``,
``Retriever``, ``evaluate`` and calibrate alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .answer_types import Answer
from .candidates import Candidates, Gatherer
from .fusion import fuse
from .postprocess import NearDuplicates
from .preprocess import preprocess
from .routing import bm25_coverage, gathered_for, needed_retrievers, store_retrievers
from .scope import Scope, for_language, scope
from .stages import STAGES, AnswerState, Window, run
from .tokens import count_tokens_for, token_spans
from .trace import answer_trace, write_trace


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
    spans = token_spans(store)
    processed = [preprocess(q, contract, spans) for q in questions]
    depth = max(depth or 0, contract.retrieve.candidates, contract.retrieve.top_k)
    # each question in the documents of its language (retrieve.language), one gathering per scope
    scopes = [for_language(store, contract, sc, p.types) for p in processed]
    out: list = [None] * len(processed)
    for s in {id(s): s for s in scopes}.values():
        idx = [i for i, x in enumerate(scopes) if x is s]
        got = gatherer.gather([processed[i] for i in idx], retrievers=retrievers, depth=depth, allowed=s.allowed,
                              allowed_docs=s.allowed_docs, extra_dense=s.extra_dense,
                              fill_missing=contract.retrieve.fusion.fill_missing, visible=s.visible, wanted=wanted,
                              progress=progress)
        for i, c in zip(idx, got):
            c.scope, out[i] = s, c
    return out


def answer(store, contract, cands: Candidates, *, sc: Scope, tags: Sequence[str] = (), count_tokens=None,
           top_k: int | None = None, explain: bool = True, rows: dict | None = None,
           with_trace: bool = True, near: NearDuplicates | None = None) -> Answer:
    """Fuse, post-process and decide for one question's candidates (cheap, pure but for row reads):
    fusion, then every stage of ``stages.STAGES`` in order.

    ``rows``: chunk rows by id already read for these candidates (``store.chunks_by_id(cands.ids)``),
    for a caller answering the same candidates under many contracts (calibrate); None reads them.
    ``with_trace=False`` leaves ``Answer.trace`` empty (calibrate reads hits and confidence only).
    ``near``: the near-duplicate relation of these candidates' texts, computed once (calibrate);
    None computes it over the window, as a query does."""
    t0 = time.perf_counter()
    p = cands.processed
    sc = cands.scope or sc  # the scope of its language it was gathered in (query.scope.for_language)
    available = store_retrievers(store)
    cov = bm25_coverage(cands)  # a signal known before fusion: a rule may condition on it
    weights = contract.retriever_weights(set(p.types), available, cov)
    sens = contract.postprocess.sensitive.rules()  # postprocess.sensitive (kbtool.sensitive)
    st = AnswerState(
        store, contract, cands, sc, tags, count_tokens, explain, near, weights,
        # A hit reports the retrievers a query of this question runs, however much was gathered
        # (calibrate and eval gather every retriever): the same hits from query, eval and calibrate.
        ran=set(needed_retrievers(contract, store, set(p.types), available)),
        fused=_fused(contract, cands, weights), sens=sens, window=Window.of(contract, top_k, sens.drops), rows=rows)
    for stage in STAGES:
        run(stage, st)
    th = st.thresholds
    return Answer(
        question=p.raw, processed=p, weights={r: round(w, 4) for r, w in weights.items()},
        rule=fusion_rule(contract, set(p.types), available, cov), hits=st.hits, decision=st.decision,
        confidence=st.top, tier=st.tier,
        thresholds={"answer": th.answer, "low_confidence": th.low_confidence},
        explanation=st.explanation, context=st.context, method=contract.retrieve.fusion.method, filters=sc.filters,
        trace=answer_trace(st, time.perf_counter() - t0) if with_trace else {}, signals=st.signals,
        conflicts=st.conflicts,
    )


def fusion_rule(contract, types: set[str], available, cov: float | None) -> dict | None:
    """Which rule of ``retrieve.rules`` fused the question (its index and ``when``) and the BM25
    coverage it read; None when ``retrieve.fusion.weights`` did (or a single-retriever method)."""
    if contract.retrieve.fusion.method not in ("weighted", "rrf"):
        return None
    rule = contract.rule_for(types, available, cov)
    if rule is None:
        return None
    when = rule.when if isinstance(rule.when, str) else rule.when.model_dump()
    return {"index": next(i for i, r in enumerate(contract.retrieve.rules) if r is rule), "when": when,
            "bm25_coverage": None if cov is None else round(cov, 4)}


def _fused(contract, cands: Candidates, weights: dict[str, float]) -> list[tuple[str, float]]:
    """The candidates of the retrievers this question is fused with, fused (calibrate gathers
    every retriever for every question; a query only those it weighs: both fuse the same pool)."""
    fusion, ids, scores = contract.retrieve.fusion, cands.ids, cands.scores
    pool = [i for i, c in enumerate(ids) if any(c in cands.ranks.get(r, ()) for r in weights)]
    if len(pool) != len(ids):
        ids, scores = [ids[i] for i in pool], {r: a[pool] for r, a in scores.items()}
    return fuse(ids, scores, weights, method=fusion.method, normalization=fusion.normalization, rrf_k=fusion.rrf_k)


@dataclass
class Searcher:
    """Scope → gather → answer over one store for one caller: the chain ``retrieve``, ``Retriever``,
    ``evaluate``, calibrate and serve (through ``retrieve``) all run. ``scope`` is fixed (filters
    and access, ``Searcher.of`` computes it); the contract answering may vary per call (a mode,
    a calibrated setting) over candidates gathered once."""

    store: Any
    contract: Any
    scope: Scope
    embedder: Any = None

    @classmethod
    def of(cls, store, contract, filters: Sequence[str] = (), principal: str | None = None,
           allow: Sequence[str] | None = None, embedder=None) -> "Searcher":
        """The searcher of a caller: the contract's and ``filters``, the access of ``principal`` / ``allow``."""
        return cls(store, contract, scope(store, contract, filters, principal, allow), embedder)

    def gather(self, questions: Sequence[str], *, depth: int | None = None,
               retrievers: tuple[str, ...] | None = None, progress=None) -> list[Candidates]:
        return gather(self.store, self.contract, questions, sc=self.scope, embedder=self.embedder, depth=depth,
                      retrievers=retrievers, progress=progress)

    def answer(self, cands: Candidates, contract=None, **kw) -> Answer:
        """``answer`` for these candidates under ``contract`` (None: the searcher's own)."""
        return answer(self.store, contract or self.contract, cands, sc=self.scope, **kw)

    def search(self, questions: Sequence[str], *, depth: int | None = None, progress=None, **kw) -> list[Answer]:
        """Each question answered under the contract, gathering what each question runs."""
        return [self.answer(c, **kw) for c in self.gather(questions, depth=depth, progress=progress)]

    def compare(self, questions: Sequence[str], variants: dict, *, depth: int | None = None, progress=None,
                tags: Sequence[Sequence[str]] | None = None, **kw) -> dict[str, list[Answer]]:
        """Each question answered under each of ``variants`` ({name: contract}, e.g. modes over this
        one), its candidates gathered once for what any variant runs. ``tags``: per question."""
        cands = self.gather(questions, depth=depth, retrievers=gathered_for(self.store, list(variants.values())),
                            progress=progress)
        tags = tags if tags is not None else [()] * len(cands)
        return {name: [self.answer(c, variant, tags=t, **kw) for c, t in zip(cands, tags)]
                for name, variant in variants.items()}


def retrieve(store, contract=None, questions: str | Sequence[str] = (), *, filters: Sequence[str] = (),
             principal: str | None = None, allow: Sequence[str] | None = None, tags: Sequence[str] = (),
             embedder=None, top_k: int | None = None, progress=None, trace_path: str | Path | None = None):
    """Answer one question (returns an ``Answer``) or many (returns a list), as the contract says."""
    from ..contract import default_contract

    contract = contract or default_contract()
    single = isinstance(questions, str)
    qs = [questions] if single else list(questions)
    store.require_indexed()
    searcher = Searcher.of(store, contract, filters, principal, allow, embedder)
    t0 = time.perf_counter()
    answers = searcher.search(qs, depth=top_k, progress=progress, tags=tags, count_tokens=count_tokens_for(store),
                              top_k=top_k)
    path = trace_path or contract.trace.path
    if path:
        write_trace(path, answers, contract, time.perf_counter() - t0, caller={"principal": principal, "allow": list(allow or [])})
    return answers[0] if single else answers

