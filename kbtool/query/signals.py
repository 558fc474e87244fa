"""Answerability signals: what a question's candidates say about whether the knowledge base answers it.

Computed by the pipeline for every question, over the chunks the caller may see (the filters'
and access's chunks: a term only hidden chunks hold counts as absent, so no signal moves with
restricted content). ``decide`` turns them into P(answerable) with the contract's model
(``decide.model``, fitted by ``kbtool calibrate``); every signal is in ``Answer.signals``, the
``--json`` output and the trace.

Signals (all numbers, in [0, 1] unless said otherwise):

- ``relevance``: the best hit's confidence (cosine / BM25 coverage mix at the question's weights);
- ``cosine``, ``coverage``: the best cosine (of the dense retriever the question weighs most) and
  the best BM25 coverage among the top hits;
- ``absent_kb``: the weighted share of the question's terms that no permitted chunk contains
  (names the knowledge base never mentions; weights: ``term_weights``);
- ``absent_top``: the weighted share of the question's terms the top hit does not contain (both
  are 1 for a question with no informative term at all: '???', 'the a of');
- ``named_absent_kb``: the weight of the weightiest of the question's named things
  (``kbtool.query.names``: an identifier, an option, a capitalised name, a quoted term; weight 1,
  less for a name made of everyday words) that no permitted chunk mentions;
- ``named_absent_top``: the same for the documents of the top ``TOP_DOCS`` hits (a library named
  once elsewhere in the docs is not an answer about it). Both 0 for a question naming nothing: an
  everyday word the documents lack is no evidence of absence;
- ``agreement``: the share of the retrievers fused with whose top 5 holds the fused top hit;
- ``dense_margin``: top-1 minus top-2 cosine of the dense retriever (0 with a single candidate);
- ``bm25_margin``: top-1 minus top-2 BM25 score of the BM25 retriever, over the coverage bound;
- ``identifier``, ``cjk``: 1 when the question is of that detected type, else 0;
- ``terms``: log(1 + number of distinct analysed question terms).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..contract import FEATURES  # noqa: F401  (the names ``compute`` returns, which decide.model may use)
from ..store.analyzer import CJK


def term_weights(index, terms: list[str], mask: np.ndarray | None) -> dict[str, tuple[float, bool]]:
    """term -> (weight, present in a permitted chunk) for the distinct query terms.

    A term's weight is its IDF over the permitted chunks (an absent term gets the IDF of a term in
    no chunk, the highest there is) times its informativeness in general language: 1 for a word
    rarer than Zipf 4.5 (``wordfreq``: 'laptop' 4.2, 'mangum' 2.2, an identifier 0), falling to 0 at
    Zipf 5.5 ('my' 6.6, 'something' 5.8, 'i' 7.1). A knowledge base written in the third person
    never holds 'I' or 'my'; that says nothing about whether it answers the question."""
    from ..store.bm25 import idf

    if index is None or index.retriever is None:
        return {}
    n, method = index.n_rows(mask), index.idf_method
    out: dict[str, tuple[float, bool]] = {}
    for t in dict.fromkeys(terms):
        df = index.df(t, mask)  # over the live rows of every segment
        out[t] = (idf(method, df, max(n, 1)) * informativeness(t), df > 0)
    return out


@lru_cache(maxsize=65536)
def informativeness(term: str) -> float:
    """1 for a rare word, 0 for an everyday one: min(1, max(0, 5.5 - Zipf frequency))."""
    return min(1.0, max(0.0, ZIPF_EVERYDAY - zipf(term)))


ZIPF_EVERYDAY = 5.5  # a word at least this frequent in general language carries no weight


def zipf(term: str) -> float:
    """The term's Zipf frequency in general language (English; Chinese for CJK terms): log10 of
    its occurrences per billion words, 0 when unknown. A CJK term is looked up whole (kbtool has
    already segmented it) in wordfreq's Chinese list, so wordfreq's own segmenter never loads.

    An English term of letters and underscores (nearly every analysed word: 'laptop', 'fastapi',
    'add_middleware') is one token to wordfreq, so its ``zipf_frequency`` is the list's entry,
    rounded as wordfreq rounds: read from the on-disk table, without importing wordfreq (its
    import and English list cost ~0.2 s of a cold query). Any other term (digits, dots,
    apostrophes, accents) goes to wordfreq itself. Tests compare the two on every word of the list."""
    if CJK.search(term):
        freq = _frequencies("zh").get(term, 0.0)
        return max(0.0, math.log10(freq) + 9) if freq > 0 else 0.0
    if _ONE_TOKEN.match(term):
        return _wordfreq_zipf(_frequencies("en").get(term, 0.0))
    from wordfreq import zipf_frequency

    return zipf_frequency(term, "en")


_ONE_TOKEN = re.compile(r"[a-z]+(?:_[a-z]+)*\Z")  # one wordfreq token, no digits (wordfreq smashes those)


def _wordfreq_zipf(freq: float) -> float:
    """wordfreq's ``zipf_frequency`` of a one-token word whose list frequency is ``freq`` (0: not
    listed): the frequency floored at Zipf 0, rounded to 3 significant digits, then to 0.01 Zipf."""
    unrounded = max(freq, 1e-9)
    rounded = round(unrounded, math.floor(-math.log(unrounded, 10)) + 3)
    return round(math.log(rounded, 10) + 9, 2)


@lru_cache(maxsize=4)
def _frequencies(lang: str):
    """wordfreq's frequency table of ``lang``, read from disk word by word (``store.lexicon``):
    a question looks up a few words of 330k, and wordfreq itself is never imported for them."""
    from importlib.metadata import version

    from .._env import cache_dir
    from ..store.lexicon import Lexicon, file_stamp

    def full() -> dict:
        from wordfreq import get_frequency_dict

        return get_frequency_dict(lang)

    return Lexicon(Path(cache_dir()) / f"wordfreq-{lang}.sqlite", file_stamp("wordfreq", version("wordfreq"), lang),
                   lambda: full().items(), full)


def _share(weights: dict[str, tuple[float, bool]] | None, absent) -> float:
    """The weighted share of the terms ``absent`` picks. A question with no informative term
    ('???', 'the a of') has nothing a chunk could hold: 1. Weights not computed (no BM25): 0."""
    if weights is None:
        return 0.0
    total = sum(w for w, _ in weights.values())
    if total <= 0:
        return 1.0
    return sum(w for t, (w, _) in weights.items() if absent(t)) / total


def _margin(scores: np.ndarray, ranks: dict[str, int], pos: dict[str, int], second_required: bool = False) -> float:
    """Top-1 minus top-2 score of a retriever's own list. Without a second candidate: the top score
    (BM25: every other chunk holds no query term, a real 0), or with ``second_required`` 0 (dense:
    every chunk in scope has a cosine, so a lone candidate means a scope of one chunk, with nothing
    to stand out from)."""
    ordered = [scores[pos[c]] for c, _ in sorted(ranks.items(), key=lambda x: x[1])[:2]]
    ordered = [float(s) for s in ordered if not math.isnan(s)]
    if not ordered or (second_required and len(ordered) < 2):
        return 0.0
    return ordered[0] - (ordered[1] if len(ordered) > 1 else 0.0)


TOP_DOCS = 3  # named_absent_top: the documents of this many top hits


def named_absent(names, docs: set | None) -> float:
    """The weight of the weightiest named thing absent from ``docs`` (None: from every permitted
    chunk); 0 when none is. The largest, not a share: 'FastAPI on Vercel' is about Vercel however
    often the docs say FastAPI."""
    return max((m.weight for m in names or () if not (m.in_kb if docs is None else m.everywhere or m.docs & docs)),
               default=0.0)


def main_dense(fused_with: dict[str, float]) -> str | None:
    """The dense retriever a question's dense signals read: the one it weighs most (``dense`` on a
    tie), None when it weighs none."""
    dense = [(w, r == "dense", r) for r, w in fused_with.items() if r != "bm25" and w > 0]
    return max(dense)[2] if dense else None


def compute(cands, hits, best, tokens_of, fused_with: dict[str, float] | None = None) -> dict[str, float]:
    """The signals of one answered question. ``hits``: the hits the decision looks at (the
    contract's top_k), ``best``: the one with the top confidence, ``tokens_of(chunk_id)``: the
    analysed tokens of a hit (cached by the caller), ``fused_with``: retriever -> weight the
    question was fused with (None: dense and BM25). The dense signals read ``main_dense``; agreement
    counts the retrievers fused with — so a question's signals never depend on what else was gathered."""
    fused_with = {"dense": 1.0, "bm25": 1.0} if fused_with is None else fused_with
    weights = cands.term_weights  # None: not computed (no BM25 index)
    top = hits[0] if hits else None
    top_tokens = set(tokens_of(top.chunk_id)) if top is not None and weights else set()
    pos = {c: i for i, c in enumerate(cands.ids)}
    agree = []
    for r in fused_with:
        ranks = cands.ranks.get(r)
        if ranks and top is not None:
            agree.append(1.0 if ranks.get(top.chunk_id, 10**9) <= 5 else 0.0)
    dense = main_dense(fused_with)
    scores = cands.score(dense) if dense else None
    cosines = [] if scores is None else [float(scores[pos[h.chunk_id]]) for h in hits]
    cosines = [c for c in cosines if not math.isnan(c)]
    bound = cands.bm25_bound
    types = set(cands.processed.types)
    top_docs = {h.doc_id for h in hits[:TOP_DOCS]}
    return {
        "relevance": round(best.confidence, 4) if best is not None else 0.0,
        "cosine": round(max(cosines, default=0.0), 4),
        "coverage": round(max((h.bm25_coverage for h in hits if h.bm25_coverage is not None), default=0.0), 4),
        "absent_kb": round(_share(weights, lambda t: not weights[t][1]), 4),
        "absent_top": round(_share(weights, lambda t: t not in top_tokens), 4) if top is not None else 1.0,
        "named_absent_kb": round(named_absent(cands.names, None), 4),
        "named_absent_top": round(named_absent(cands.names, top_docs), 4),
        "agreement": round(sum(agree) / len(agree), 4) if agree else 0.0,
        "dense_margin": round(_margin(scores, cands.ranks.get(dense, {}), pos, second_required=True), 4)
        if dense else 0.0,
        "bm25_margin": round(_margin(cands.bm25, cands.bm25_rank, pos) / bound, 4) if bound > 0 else 0.0,
        "identifier": 1.0 if "identifier" in types else 0.0,
        "cjk": 1.0 if "cjk" in types else 0.0,
        "terms": round(math.log1p(len(weights or {})), 4),
    }
