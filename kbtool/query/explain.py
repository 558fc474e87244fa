"""Why a decision: the value ``decide`` compared with the thresholds, and on a refusal or low
confidence the question's terms no permitted chunk holds (``missing_terms``), index terms close to
them (``suggestions``) and the nearest miss, cited. ``shown`` rounds every number a person reads."""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from .routing import store_retrievers

if TYPE_CHECKING:
    from .scope import Scope


# Words a question is phrased with, never its subject: a knowledge base without "how" (or "怎样")
# misses nothing.
# (The BM25 stopword list is bm25s' 33 words, which keeps these.)
PHRASING = frozenset("""how what why when where which who whom whose can could should would does did
you your yours our ours we us me my mine has have had may might must shall will please tell explain
mean means meaning anyone someone something anything there here about does doing done get got
怎样 怎么样 怎么 如何 什么 为什么 哪些 哪个 哪里 哪儿 多少 能否 是否 可以 请问 一下 的话""".split())


def missing_terms(store, processed, terms: list[str], allowed: set[str] | None) -> list[str]:
    """Exact identifiers and query terms that no (permitted) chunk contains, but for everyday words
    (``signals.informativeness`` 0: the absent-term signal gives them no weight either)."""
    from ..store.analyzer import CJK
    from .signals import informativeness

    out: list[str] = []
    index = store.bm25()
    mask = index.held("mask", allowed) if allowed is not None else None
    analyse = store.analyzer
    for ident in processed.identifiers:
        whole = ident["text"].lower()
        if whole in analyse(ident["text"]):
            # The analyser keeps an identifier whole: a chunk holds it iff BM25 has the token (a
            # scan of every chunk's text costs 280 ms at 100k chunks, and would count KB-1-990 as
            # holding KB-1-99)
            held = index.has_term(whole, mask) or _inside_longer(index, whole, mask)
        else:
            held = store.any_chunk_contains(ident["text"], allowed)
        if not held:
            out.append(ident["text"])
    covered = " ".join(out).lower()
    for term in dict.fromkeys(terms):
        short = 2 if CJK.search(term) else 3  # a two-character Chinese word is a word
        if term in covered or len(term) < short or term in PHRASING or index.has_term(term, mask):
            continue
        if informativeness(term) == 0.0:  # an everyday word ('come', 'our'): its absence says nothing
            continue
        if len(term) >= 4:
            # a word form of a permitted indexed word ('causes' beside 'cause') is not worth a mention
            if any(v != term and index.has_term(v, mask) for v in _vocab(index).prefixed(term[:4])):
                continue
        out.append(term)
    return out


# A word suggestion must mean what the missing word means: cosine of the two words' embeddings
# (bundled all-MiniLM-L6-v2) at least this. Measured: colour/color 0.97, synchronise/synchronize
# 0.96, licence/license 0.92, webhok/webhook 0.89, login/logon 0.85, recieve/receive 0.67; and
# admin/adman 0.44, quota/quote 0.38, rate/rather 0.30, helm/help 0.22, mount/amount 0.22.
MEANING = 0.5


def suggestions(store, missing: list[str], allowed: set[str] | None, filters: list[str],
                embedder=None, gate=None) -> list[str]:
    """Index terms close to each missing term (only terms a permitted chunk holds), and a broader filter.

    An identifier's siblings share the part before its digits (zeta-9931 -> zeta-4410). A plain
    number gets none (3000 is not 300). A word's candidates must be close in spelling and, with
    ``embedder``, in meaning (cosine >= ``MEANING``), or be a misspelling: one edit from a word the
    model knows whole while it splits the missing word into more pieces (paswsord -> password,
    whose embeddings the model does not relate). Without an embedder (a BM25-only store, an
    endpoint model not called for this), only a misspelling qualifies. ``gate``: the sensitive
    rules' ``scan``: a candidate is offered only when a chunk holds it in text the rules let
    through (a term only a redacted credential holds is never a suggestion)."""
    out: list[str] = []
    index = store.bm25()
    mask = index.held("mask", allowed) if allowed is not None else None
    vocab = _vocab(index)
    # Candidates are picked among the terms the caller's chunks hold: hidden ones must not crowd out
    # (or, by their absence, reveal) what it may read
    keep = None if mask is None else (lambda t: index.has_term(t, mask))
    found: list[tuple[str, bool, list[str]]] = []  # (term, is a word, candidates close in spelling)
    for term in missing[:5]:
        word = term.lower()
        if re.fullmatch(r"[\d.,:/-]+", word):
            continue  # a number or a date: a different one is a different fact
        stem = re.match(r"\D*", word).group(0)
        if stem != word and len(stem) >= 2:
            pool = [v for v in vocab.prefixed(stem, near=word, limit=SIBLINGS, keep=keep) if v != stem]
            close = difflib.get_close_matches(word, pool, n=6, cutoff=0.3)
        else:
            pool = [v for v in vocab.initial(word[:1]) if abs(len(v) - len(word)) <= 3 and not v.isdigit()]
            # every match, then the caller's 6 best: the 6 best of its own terms, asking about few
            close = [c for c in difflib.get_close_matches(word, pool, n=max(len(pool), 1), cutoff=0.75)
                     if keep is None or keep(c)][:6]
        found.append((term, stem == word or len(stem) < 2, [c for c in close if c != word and index.has_term(c, mask)]))
    similar = _meaning(embedder, [(t.lower(), c) for t, is_word, cs in found if is_word for c in cs])
    for term, is_word, close in found:
        if is_word:
            close = [c for c in close if similar.get((term.lower(), c)) or _misspelling(embedder, term.lower(), c)]
        if gate is not None:
            close = [c for c in close[:6] if _shown(store, index, c, mask, gate)]
        if close[:3]:
            out.append(f"instead of {term!r}, the index has: {', '.join(close[:3])}")
    for spec in filters:
        out.append(f"the filter {spec} narrows the search: try without it")
    return out


GATE_CHUNKS = 20  # chunks holding a candidate read to find one showing it (a credential is in few)


def _shown(store, index, term: str, mask, gate) -> bool:
    """Whether a (permitted) chunk holds ``term`` in text the sensitive rules let through: its
    text with the rules' redactions (against its source span too) still holds the term."""
    from ..document import embed_text

    rows = index.rows_holding(term)
    if rows is None:  # in every chunk: an everyday word
        return True
    ids = [index.chunk_ids[r] for r in rows.tolist() if mask is None or mask[r]][:GATE_CHUNKS]
    chunks = store.chunks_by_id(ids)
    for cid in ids:
        row = chunks.get(cid)
        if row is None:
            continue
        text, drop, _ = gate(row["text"], *store.source_window(row["doc_id"], row["char_start"], len(row["text"])))
        if drop is None and term in store.analyzer(embed_text(row["prefix"], text)):
            return True
    return False


# An identifier's siblings compared in spelling: at most this many, the nearest in sorted order to
# it (a store of 100k chunks held 60k KB-… codes: comparing all took 4 s per refused question,
# 100 take 7 ms).
SIBLINGS = 100
_JOINED = re.compile(r"[-_./:]")


class _Vocabulary:
    """An index's terms sorted (a prefix is a range) and by first character, made once per index."""

    def __init__(self, terms: list[str]):
        self.sorted = sorted(terms)
        self.by_initial: dict[str, list[str]] = {}
        self.compound = [t for t in self.sorted if _JOINED.search(t)]  # identifiers of several parts
        for t in self.sorted:
            self.by_initial.setdefault(t[:1], []).append(t)

    def prefixed(self, prefix: str, near: str | None = None, limit: int | None = None,
                 keep: Callable[[str], bool] | None = None) -> list[str]:
        """Terms starting with ``prefix`` (the ``limit`` nearest to ``near`` in sorted order), of
        those ``keep`` accepts (a restricted caller's: terms only hidden chunks hold take no place)."""
        lo = bisect.bisect_left(self.sorted, prefix)
        hi = bisect.bisect_left(self.sorted, prefix + "\U0010ffff")
        if keep is None:
            terms, at = self.sorted[lo:hi], bisect.bisect_left(self.sorted, near or prefix, lo, hi) - lo
        else:  # the nearest kept ones on each side, up to ``limit`` each: the window below is the same
            at = bisect.bisect_left(self.sorted, near or prefix, lo, hi)
            cap = hi - lo if limit is None else limit
            left = list(itertools.islice((t for t in reversed(self.sorted[lo:at]) if keep(t)), cap))
            right = list(itertools.islice((t for t in self.sorted[at:hi] if keep(t)), cap))
            terms, at = left[::-1] + right, len(left)
        if limit is not None and len(terms) > limit:
            start = max(0, min(at - limit // 2, len(terms) - limit))
            terms = terms[start:start + limit]
        return terms

    def initial(self, ch: str) -> list[str]:
        return self.by_initial.get(ch, [])


_VOCABS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _inside_longer(index, whole: str, mask) -> bool:
    """Whether a (permitted) chunk holds identifier ``whole`` inside a longer one the analyser kept
    whole instead (``client.sync.timeout_ms``, ``tw-e1042/tw-e1043``): a token holding it between
    separators (``kb-1-990`` does not hold ``kb-1-99``)."""
    bounded = re.compile(r"(?<![^\W_])" + re.escape(whole) + r"(?![^\W_])")
    return any(whole in t and bounded.search(t) and index.has_term(t, mask) for t in _vocab(index).compound)


def _vocab(index) -> _Vocabulary:
    got = _VOCABS.get(index)
    if got is None:
        got = _VOCABS[index] = _Vocabulary(index.vocabulary())
    return got


def _meaning(embedder, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], bool]:
    """Whether each (word, candidate) pair is close in meaning: one batch through the model."""
    if embedder is None or not pairs:
        return {}
    words = list(dict.fromkeys(w for pair in pairs for w in pair))
    vecs = dict(zip(words, embedder.embed_queries(words)))
    return {(a, b): float(vecs[a] @ vecs[b]) >= MEANING for a, b in pairs}


def _misspelling(embedder, word: str, candidate: str) -> bool:
    if len(word) < 5 or _edits(word, candidate) != 1:
        return False
    if embedder is None:
        return True
    count = getattr(embedder, "count_tokens", None)
    return count is not None and count(word) > count(candidate)


def _edits(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment)."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def shown(x: float, against=()) -> str:
    """One rounding rule for every number a person reads beside a threshold (the verdict and the
    query table): two decimals, and as many more as it takes for the shown number to stand on
    the same side of each threshold in ``against`` as the number itself (0.499 < 0.5, never
    '0.50 is below 0.5')."""
    for digits in range(2, 7):
        text = f"{x:.{digits}f}"
        if all((float(text) < t) == (x < t) for t in against):
            return text
    return repr(x)


def shown_threshold(t: float) -> str:
    """A threshold with two decimals, more only when it has them (0.40, 0.455)."""
    return f"{t:.2f}" if abs(round(t, 2) - t) < 1e-12 else f"{t:g}"


def never_mentions(question: str, missing: list[str], filtered: bool) -> str:
    """"the knowledge base never mentions 'Mangum' or 'Lambda'": each term as the question spells it."""
    def spelled(term: str) -> str:
        m = re.search(r"(?<!\w)" + re.escape(term) + r"(?!\w)", question, re.IGNORECASE)
        return repr(m.group(0) if m else term)

    names = [spelled(t) for t in missing[:4]]
    names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    if len(missing) > 4:
        names += f" (and {len(missing) - 4} more)"
    # Filters narrow the search, and the caller chose them. Access does too, but a restricted
    # caller reads exactly what it would over a store of its documents alone: no word of a limit.
    return ("no chunk the filters allow mentions " if filtered else "the knowledge base never mentions ") + names


def word_embedder(store, retrievers):
    """The store's model for the suggestions' meaning check, when the query already used it: a
    local model is loaded once per process (``load_embedder`` caches it), so embedding a few words
    costs milliseconds. An endpoint model is not called for this (a request per refusal, and a
    test's fake endpoint must never be), nor is a model loaded for a BM25-only query."""
    if "dense" not in retrievers:
        return None
    try:
        spec = store.embedding_spec()
        if spec.backend == "http":
            return None
        from ..embed import load_embedder

        return load_embedder(spec)
    except Exception:  # no model at hand: spelling alone decides (stricter)
        return None


def explain_decision(store, cands, best, decision, th, sc: Scope, explain: bool, *, value: float | None = None,
             name: str = "confidence", absence: str | None = "threshold", gone: list | None = None,
             gate=None, tier: str | None = None) -> dict:
    """Why this decision: the value ``decide`` compared with the thresholds, and on a refusal or
    low confidence, the question's terms no permitted chunk holds and the nearest miss, cited.

    ``value`` is what ``decide`` compared with the thresholds (``Answer.confidence``: the
    answerability probability when the contract has a model, else the best hit's confidence);
    ``best.confidence`` is that hit's relevance (cosine / BM25 coverage mix). The message calls
    the first ``name`` ("P(answerable)" with a model, else "confidence") and the second
    "relevance"; every number in it is rounded by
    ``decide.shown`` against the thresholds, as the query table rounds them. ``absence`` is the
    evidence of absence ``decide`` saw (``decide.absence``), ``gone`` the named things the top
    documents never mention (``names.missing``): a refusal names them. ``tier``: the threshold tier
    (``decide.tiers``) the thresholds are from, named beside each (None: the contract has no tiers)."""
    of = "" if tier is None else f" ({tier} tier)"
    if value is None and best is not None:
        value = best.confidence
    limits = (th.answer, th.low_confidence)
    out: dict = {
        "best": None if best is None else {"rank": best.rank, "doc_id": best.doc_id, "citation": best.citation,
                                           "section_path": best.section_path, "confidence": best.confidence},
    }
    where = "" if best is None else best.citation or best.doc_id
    if decision == "answer":
        out["message"] = (f"{name} {shown(value, limits)} ≥ answer threshold {shown_threshold(th.answer)}{of}"
                          + (f"; best: {where}" if where else ""))
        return out
    missing = None
    if explain and "bm25" in store_retrievers(store):
        missing = missing_terms(store, cands.processed, cands.query_terms, sc.allowed)
        out["missing_terms"] = missing
        out["suggestions"] = suggestions(store, missing, sc.allowed, sc.filters, word_embedder(store, cands.retrievers),
                                         gate=gate)
    parts = []
    if value is None:
        parts.append("no chunk matched" + (" (the filters and access allow none)" if sc.allowed == set() else ""))
    elif decision == "refuse":
        parts.append(f"{name} {shown(value, limits)} is below the refuse threshold {shown_threshold(th.low_confidence)}{of}")
        if absence == "far":
            parts.append("nothing in the knowledge base is near the question")
    elif value < th.low_confidence:
        parts.append(f"{name} {shown(value, limits)} is below the refuse threshold {shown_threshold(th.low_confidence)}{of}, "
                     "but nothing the question names is missing and the sources are near it: answered with the "
                     "notice, the answer may not be in these sources")
    else:
        parts.append(f"{name} {shown(value, limits)} is below the answer threshold {shown_threshold(th.answer)}{of} "
                     f"(refuse below {shown_threshold(th.low_confidence)}): the answer may not be in these sources")
    if gone and decision != "answer":
        out["missing_names"] = [m.to_dict() for m in gone]
        absent_kb = [m.text for m in gone if not m.in_kb]
        elsewhere = [m.text for m in gone if m.in_kb]
        if absent_kb:
            parts.append(never_mentions(cands.processed.text, absent_kb, filtered=bool(sc.filters)))
        if elsewhere:
            parts.append("the top documents never mention " + " or ".join(repr(t) for t in elsewhere[:4])
                         + " (other documents do)")
    if missing:
        named = {t.lower() for m in gone or () for t in (*m.tokens, m.text)}
        rest = [t for t in missing if t.lower() not in named]
        if rest:
            parts.append(never_mentions(cands.processed.text, rest, filtered=bool(sc.filters)))
    if best is not None:
        label = "nearest miss" if decision == "refuse" else "best match"
        # the hit of highest relevance, which fusion may rank below others: say where it stands
        ranked = "" if best.rank == 1 else f" (#{best.rank} in the ranking, the highest relevance)"
        parts.append(f"{label}: {where}{ranked} at relevance {shown(best.confidence, limits)}")
    out["message"] = "; ".join(parts)
    return out
