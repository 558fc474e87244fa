"""Named things in a question, and where the knowledge base mentions them: the evidence of absence.

A question that names something — an error code, an API, an option, another library, a cloud
service — which the knowledge base never mentions is about something the knowledge base does not
cover. An everyday word the documents do not use ('sluggish', 'wipe') says no such thing: the
documents may say it in other words. So names are found apart from words (``named_things``), and
where each one occurs is looked up in the BM25 index over the chunks the caller may see
(``where``): the answerability signals ``named_absent_kb`` and ``named_absent_top``
(``kbtool.query.signals``) and the decision's refuse tier (``kbtool.query.decide``) read them.

What counts as a named thing (each kind is recorded, the trace shows it):

- the identifiers ``preprocess`` detects (error codes, config keys, API paths, headers, versions,
  camelCase and PascalCase words, quoted or backticked terms);
- options: ``--flag``, ``-x``, ``key=value``;
- capitalised words that do not start a sentence ('on Heroku', 'with Celery', 'AWS Lambda':
  consecutive ones are one name); 'I' and sentence-initial words are not names;
- in CJK text: Latin-script words ('如何在 Kubernetes 上部署'), and the proper nouns jieba tags
  (``ns`` place, ``nt`` organisation, ``nz`` other proper noun; not ``nr``, see ``PROPER_TAGS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..store.analyzer import CJK
from .preprocess import detect_identifiers
from .signals import zipf

_OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*(?:=[^\s,;?]+)?|\b[A-Za-z_][\w.]*=[^\s,;?]+")
_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_+#]*(?:[.'’-][A-Za-z0-9_+#]+)*")
_POSSESSIVE = re.compile(r"['’]s$")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$|^\s*$|[\"'“(\[]\s*$")
_LATIN_IN_CJK = re.compile(r"[A-Za-z][A-Za-z0-9+#._-]*")
# Capitalised words that are grammar, not names, wherever they stand.
_NOT_NAMES = frozenset({"I", "I'm", "I've", "I'd", "I'll", "OK", "Ok"})
# jieba: place, organisation, other proper noun. Not 'nr' (person): its dictionary tags everyday
# words as names ('黑屏' a black screen, '卡得'), and a docs question rarely names a person.
PROPER_TAGS = ("ns", "nt", "nz")
# A lower-case word this rare in general language ('slowapi', 'i18n'; 'gizmo' is 2.9) is a name too.
RARE_ZIPF = 2.0
# A name made of everyday words weighs less: 1 up to Zipf 4.0 ('Slack' 3.7, 'Linux' 4.0), 0 from
# 5.0 ('March' 5.3, 'US' 6.0); 'PC' (4.5) weighs 0.47. Identifiers and options always weigh 1.
NAME_EVERYDAY = 5.0
WEIGHED_KINDS = ("name", "latin", "rare") + tuple(f"proper_{t}" for t in PROPER_TAGS)


@dataclass(frozen=True)
class Named:
    """A named thing in the question: its text, its kind, and where it stands (characters)."""

    text: str
    kind: str
    start: int
    end: int


def named_things(text: str) -> list[Named]:
    """The named things of a question, in order, overlapping finds kept once (the longest)."""
    found: list[Named] = []
    pos = 0
    for ident in detect_identifiers(text):
        at = text.find(ident["text"], pos)
        at = text.find(ident["text"]) if at < 0 else at
        if at >= 0:
            found.append(Named(ident["text"], ident["kind"], at, at + len(ident["text"])))
            pos = at + len(ident["text"])
    found += [Named(m.group(0).split("=")[0] if not m.group(0).startswith("-") else m.group(0), "option",
                    m.start(), m.end()) for m in _OPTION.finditer(text)
              if not m.group(0).startswith("-") or not m.group(0)[1:].isdigit()]
    found += _capitalised(text)
    for m in _WORD.finditer(text):
        word = _POSSESSIVE.sub("", m.group(0))  # "notebook's" is the word 'notebook'
        if word.islower() and len(word) >= 4 and zipf(word) < RARE_ZIPF:
            found.append(Named(word, "rare", m.start(), m.start() + len(word)))
    if CJK.search(text):
        found += [Named(m.group(0), "latin", m.start(), m.end()) for m in _LATIN_IN_CJK.finditer(text)
                  if len(m.group(0)) > 1]
        found += _proper_nouns(text)
    found.sort(key=lambda n: (n.start, -(n.end - n.start)))
    out, end = [], -1
    for n in found:
        if n.start >= end and n.text.strip():
            out.append(n)
            end = n.end
    return out


def _capitalised(text: str) -> list[Named]:
    """Capitalised words not at a sentence's start, consecutive ones joined ('Google Cloud Run')."""
    out: list[Named] = []
    run: list[re.Match] = []

    def close():
        if run:
            s, e = run[0].start(), run[-1].end()
            out.append(Named(text[s:e], "name", s, e))
            run.clear()

    for m in _WORD.finditer(text):
        word = m.group(0)
        initial = _SENTENCE_END.search(text[: m.start()]) is not None
        capital = word[0].isupper() and word not in _NOT_NAMES and len(word) > 1
        joined = run and text[run[-1].end(): m.start()] == " "
        if capital and not initial and (joined or not run):
            run.append(m)
        elif capital and not initial:
            close()
            run.append(m)
        else:
            close()
    close()
    return out


def _proper_nouns(text: str) -> list[Named]:
    """CJK words jieba's dictionary tags as proper nouns (``PROPER_TAGS``), with their positions: the
    question cut as ``jieba.posseg`` cuts it without HMM (the dictionary's words), each word looked
    up in the dictionary's tags (``_proper_words``), so ``jieba.posseg`` is never imported."""
    from ..store.analyzer import _jieba

    proper = _proper_words()
    out, pos = [], 0
    for word in _jieba().cut(text, HMM=False):  # the dictionary's tags only: HMM guesses tag '黑屏' a person
        at = text.find(word, pos)
        if at < 0:
            continue
        pos = at + len(word)
        tag = proper.get(word) if CJK.search(word) and len(word) > 1 else None
        if tag:
            out.append(Named(word, f"proper_{tag}", at, pos))
    return out


@lru_cache(maxsize=1)
def _proper_words():
    """word -> tag for the words jieba's dictionary tags ``PROPER_TAGS``, read from its dict.txt once
    into a ``store.lexicon.Lexicon`` beside jieba's own: importing ``jieba.posseg`` reads all 349k
    tags (~0.6 s of a cold query)."""
    import os

    import jieba

    from .._env import cache_dir
    from ..store.analyzer import _jieba
    from ..store.lexicon import Lexicon, file_stamp

    source = _jieba().dt.dictionary or os.path.join(os.path.dirname(jieba.__file__), jieba.DEFAULT_DICT_NAME)

    def full() -> dict:
        table = {}
        with open(source, "rb") as f:
            for line in f:
                parts = line.decode("utf-8").split()
                if len(parts) == 3 and parts[2] in PROPER_TAGS:
                    table[parts[0]] = parts[2]
        return table

    stamp = file_stamp("jieba-tags", jieba.__version__, source, os.path.getsize(source), int(os.path.getmtime(source)),
                       *PROPER_TAGS)
    return Lexicon(Path(cache_dir()) / "jieba-proper-tags.sqlite", stamp, lambda: full().items(), full)


@dataclass(frozen=True)
class Mentioned:
    """A named thing and where the permitted chunks mention it: the documents whose chunks hold
    every one of its tokens (``everywhere``: in every chunk, a Robertson index keeps no postings)."""

    text: str
    kind: str
    tokens: tuple[str, ...]
    docs: frozenset
    everywhere: bool = False
    weight: float = 1.0

    @property
    def in_kb(self) -> bool:
        return self.everywhere or bool(self.docs)

    def to_dict(self) -> dict:
        return {"text": self.text, "kind": self.kind, "weight": self.weight, "in_kb": self.in_kb,
                "documents": len(self.docs)}


def weight(kind: str, tokens: tuple[str, ...]) -> float:
    """How much a name's absence says: identifiers and options 1; a name of words, by its rarest
    word's frequency in general language (``NAME_EVERYDAY``)."""
    if kind not in WEIGHED_KINDS:
        return 1.0
    rarest = min(zipf(t) for t in tokens)
    return round(min(1.0, max(0.0, NAME_EVERYDAY - rarest)), 4)


def key_tokens(analyzer, text: str) -> tuple[str, ...]:
    """The tokens a mention of ``text`` must hold: its analysed tokens without those that are only
    parts of another of them ('tw-e5120' stands for itself, not for 'tw' and 'e5120')."""
    tokens = list(dict.fromkeys(analyzer(text)))
    parts = {p for t in tokens for p in re.split(r"[-_./:]", t) if p != t}
    return tuple(t for t in tokens if t not in parts)


def where(store, index, processed, mask: np.ndarray | None) -> list[Mentioned]:
    """Each named thing of the question with the documents (among the permitted chunks, ``mask``)
    that mention it. A name with no token left after analysis (stopwords only) is no evidence."""
    names = processed_names(processed)
    if not names or index is None or index.retriever is None:
        return []
    docs_of = _row_docs(store, index)
    out = []
    for n in names:
        tokens = key_tokens(store.analyzer, n.text)
        if not tokens:
            continue
        if n.kind == "rare" and len(tokens) == 1 and not index.knows(tokens[0]):
            tokens = _known_variant(index, tokens[0]) or tokens  # 'paginated' where the docs say 'pagination'
        rows, everywhere = None, True
        for t in tokens:
            got = index.rows_holding(t)
            if got is None:
                continue  # in every chunk
            everywhere = False
            rows = got if rows is None else np.intersect1d(rows, got, assume_unique=True)
            if not len(rows):
                break
        if everywhere:
            out.append(Mentioned(n.text, n.kind, tokens, frozenset(), True, weight(n.kind, tokens)))
            continue
        if mask is not None and len(rows):
            rows = rows[mask[rows]]
        docs = frozenset(docs_of[rows].tolist()) if len(rows) else frozenset()
        out.append(Mentioned(n.text, n.kind, tokens, docs, False, weight(n.kind, tokens)))
    return out


_SUFFIXES = ("ations", "ation", "ions", "ion", "ings", "ing", "ed", "es", "s", "e", "")


def _known_variant(index, word: str) -> tuple[str, ...] | None:
    """Another inflection of a rare word that the index knows ('paginated' -> 'pagination'): a rare
    word is a name only when no form of it is in the knowledge base."""
    stem = next((word[: -len(x)] for x in _SUFFIXES if x and word.endswith(x) and len(word) - len(x) >= 4), word)
    for x in _SUFFIXES:
        if stem + x != word and index.knows(stem + x):
            return (stem + x,)
    return None


def processed_names(processed) -> list[Named]:
    """The question's named things (found once per preprocessed question)."""
    return _named(processed.text)


@lru_cache(maxsize=4096)
def _named(text: str) -> tuple[Named, ...]:
    return tuple(named_things(text))


def _row_docs(store, index) -> np.ndarray:
    """The document id of each BM25 row (once per catalog generation and index)."""
    def compute():
        doc_of = {c: d for c, d, _ in store.chunk_metadata()}
        return np.array([doc_of.get(c, "") for c in index.chunk_ids], dtype=object)

    return store.memo(("row_docs", id(index), len(index.chunk_ids)), compute)


def missing(names, top_docs: set, min_weight: float = 0.0) -> list[Mentioned]:
    """The named things (weight at least ``min_weight``) the top documents never mention, weightiest first."""
    gone = [m for m in names or () if m.weight >= min_weight and not (m.everywhere or m.docs & top_docs)]
    return sorted(gone, key=lambda m: -m.weight)
