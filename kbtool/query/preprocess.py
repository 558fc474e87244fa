"""Preprocess a question as the contract says: clean it, detect its type, truncate it to the
model's budget, expand it with the thesaurus, and give each retriever its own text.

Detection is deliberately simple and visible (the trace records what was found): identifiers
are the things BM25 matches exactly and an embedding model blurs.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field

from ..store.analyzer import CJK

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
# Zero-width and direction marks join or decorate words: drop them without splitting the word.
_INVISIBLE = re.compile(r"[\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")

# Chinese function, question and pronoun words, and modal verbs: every Chinese page holds them, so
# in a BM25 query they only blur which page answers (contract ``preprocess.cjk_question_words``).
# Query side only (the index keeps them: a store's analysis never changes under it). Measured
# alone, store with use-m, built-in contract (bench/RESULTS.md "Chinese question words"):
# fastapi-zh nDCG@10 0.687 -> 0.694 (chunk), 0.833 -> 0.848 (document); the sample's Chinese
# questions 0.704 -> 0.737. bm25s's 841-word Chinese list, tried first, holds content words
# (使用, 需要, 不同) and lowered BM25 (0.657 -> 0.644).
CJK_QUESTION_WORDS = frozenset(
    "的 了 是 吗 呢 吧 啊 么 呀 怎么 怎样 怎么样 如何 什么 哪些 哪个 哪里 为什么 为何 能否 能不能 可以 是否 "
    "请问 我 我们 你 你们 它 这 那 这个 那个 一个 有没有 在 和 与 或 及 把 被 让 给 对 中 要 会 能".split())

# Each pattern names a kind of identifier; the trace shows which matched.
IDENTIFIER_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("quoted", re.compile(r"\"([^\"]{2,})\"|`([^`]{2,})`|“([^”]{2,})”")),
    ("api_path", re.compile(r"(?<![\w/])/(?:[\w{}.-]+/)*[\w{}.-]+")),
    ("error_code", re.compile(r"\b[A-Z][A-Z0-9]*-[A-Z0-9-]*\d[A-Z0-9-]*\b|\b[A-Z]{2,}[ -]?\d{3,}\b")),
    # X-Process-Time, X-Request-ID, WWW-Authenticate; Access-Control-Allow-Origin (3+ capitalised
    # parts). Two capitalised parts alone (Content-Type) read like Wi-Fi or Asia-Pacific: not matched.
    ("header", re.compile(r"\b(?:[A-Z]{1,4}-)+[A-Z][A-Za-z0-9]*(?:-[A-Z][A-Za-z0-9]*)*\b"
                          r"|\b[A-Z][a-z]+(?:-[A-Z][A-Za-z]+){2,}\b")),
    ("version", re.compile(r"\bv?\d+\.\d+(?:\.\d+)+\b|\bv\d+(?:\.\d+)?\b|(?<=release )\d+\.\d+\b|(?<=version )\d+\.\d+\b")),
    ("number", re.compile(r"\b\d{5,}\b")),
    ("config_key", re.compile(r"\b[a-z][a-z0-9]*(?:[._][a-z0-9]+)+(?:\(\))?")),
    ("camel_case", re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b")),
    # Internal capitals: a lower-case letter or digit followed by a capital (TestClient, WebDAV), or
    # two capitals before a lower-case letter (HTTPException, OAuth). A capitalised word (What,
    # Tidewater) or an acronym (HTTP, EU) is not one. Product names (PayPal, GraphQL) match too:
    # a name BM25 matches exactly, as it should.
    ("pascal_case", re.compile(r"\b(?=[A-Za-z0-9]*?(?:[a-z0-9][A-Z]|[A-Z]{2}[a-z]))[A-Z][A-Za-z0-9]+\b")),
]


@dataclass
class Processed:
    """A question after preprocessing: what each retriever sees, and what was detected."""

    raw: str
    text: str
    dense_text: str
    bm25_text: str
    types: list[str]
    identifiers: list[dict] = field(default_factory=list)
    truncated: bool = False
    tokens: int | None = None
    expansions: dict[str, list[str]] = field(default_factory=dict)
    drop_question_words: bool = False  # BM25 leaves CJK_QUESTION_WORDS out of the question's terms

    def bm25_terms(self, analyzer) -> list[str]:
        """The question's BM25 terms: ``bm25_text`` analysed as the index was, question words left out
        when the contract says so (after segmentation: cutting them out of the text would move jieba's cuts)."""
        terms = analyzer(self.bm25_text)
        return [t for t in terms if t not in CJK_QUESTION_WORDS] if self.drop_question_words else terms

    def to_dict(self) -> dict:
        return asdict(self)


def decodable(text: str) -> str:
    """Bytes that were not UTF-8 arrive from the command line as lone surrogates: U+FFFD instead."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def clean(text: str) -> str:
    text = unicodedata.normalize("NFC", decodable(text))
    text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub(" ", text)
    return " ".join(text.split())


def detect_identifiers(text: str) -> list[dict]:
    """[{kind, text}] in order of appearance, overlapping matches kept once (the longest)."""
    found: list[tuple[int, int, str, str]] = []
    for kind, pattern in IDENTIFIER_PATTERNS:
        for m in pattern.finditer(text):
            value = next((g for g in m.groups() if g), None) if m.groups() else m.group(0)
            value = (value or m.group(0)).strip()
            if kind == "config_key" and "_" not in value and "." not in value:
                continue
            if kind == "config_key" and re.fullmatch(r"[a-z]+\.[a-z]+", value) and not value.endswith("()"):
                # "e.g" / "i.e"-like words and sentence-joined words are not config keys
                if len(value.split(".")[0]) < 3:
                    continue
            found.append((m.start(), m.end(), kind, value))
    found.sort(key=lambda x: (x[0], -(x[1] - x[0])))
    out, end = [], -1
    for start, stop, kind, value in found:
        if start >= end:
            out.append({"kind": kind, "text": value})
            end = stop
    return out


def detect_types(text: str, identifiers: list[dict]) -> list[str]:
    """'identifier' and/or 'cjk' (both: 'cjk_identifier' too, a type of its own for the rules), else 'other'."""
    types = []
    if identifiers:
        types.append("identifier")
    if CJK.search(text):
        types.append("cjk")
    if len(types) == 2:
        types.append("cjk_identifier")
    return types or ["other"]


def truncate(text: str, spans: list[tuple[int, int]], limit: int, side: str) -> str:
    """Cut ``text`` to ``limit`` tokens given each token's (start, end) character span."""
    if len(spans) <= limit:
        return text
    if side == "head":
        return text[: spans[limit - 1][1]].strip()
    if side == "tail":
        return text[spans[-limit][0]:].strip()
    head = (limit + 1) // 2
    tail = limit - head
    left = text[: spans[head - 1][1]].strip()
    right = text[spans[-tail][0]:].strip() if tail else ""
    return f"{left} … {right}".strip()


def expand(text: str, thesaurus: dict[str, list[str]]) -> tuple[str, dict[str, list[str]]]:
    """Append the synonyms of every thesaurus term the text contains (case-insensitive)."""
    used: dict[str, list[str]] = {}
    low = text.lower()
    for term, synonyms in thesaurus.items():
        if term.lower() in low:
            new = [s for s in synonyms if s.lower() not in low]
            if new:
                used[term] = new
    if not used:
        return text, used
    return text + " " + " ".join(s for syns in used.values() for s in syns), used


def preprocess(question: str, contract, token_spans=None) -> Processed:
    """Apply ``contract.preprocess``. ``token_spans(text) -> [(start, end)]`` counts model tokens
    (without special tokens); without it, no truncation happens."""
    cfg = contract.preprocess
    question = decodable(question)
    text = clean(question) if cfg.clean else question
    truncated, n_tokens = False, None
    if token_spans is not None:
        spans = token_spans(text)
        n_tokens = len(spans)
        if n_tokens > cfg.max_query_tokens:
            text = truncate(text, spans, cfg.max_query_tokens, cfg.truncation)
            truncated = True
    identifiers = detect_identifiers(text)
    types = detect_types(text, identifiers)
    expanded, used = expand(text, cfg.thesaurus)
    dense = expanded if "dense" in cfg.thesaurus_applies_to else text
    bm25 = expanded if "bm25" in cfg.thesaurus_applies_to else text
    return Processed(question, text, dense, bm25, types, identifiers, truncated, n_tokens, used,
                     cfg.cjk_question_words == "drop" and "cjk" in types)
