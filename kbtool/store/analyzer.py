"""BM25 text analysis: Unicode word tokens, lowercase, optional stopwords, jieba for CJK runs.

Identifiers such as ``TW-E4031``, ``sync.timeout_ms`` or ``/v2/shares`` are emitted whole *and*
as their parts, so an exact identifier query matches the identifier far above any document that
merely shares one of its parts.
"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from pathlib import Path

# A run of letters/digits, optionally joined to further runs by one of - _ . / : (an identifier).
_RUN = re.compile(r"[^\W_]+(?:[-_./:][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
# _RUN over ASCII text, where a letter or digit ([^\W_]) is [A-Za-z0-9]: the same runs, found faster.
_ASCII_RUN = re.compile(r"[A-Za-z0-9]+(?:[-_./:][A-Za-z0-9]+)*")
# CJK script (kana, CJK ideographs, Hangul): the analyser, question types and answerability signals
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_CJK_SPLIT = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)")


@dataclass(frozen=True)
class AnalyzerConfig:
    """Recorded in the store manifest: queries must be analysed exactly like the index."""

    lowercase: bool = True
    stopwords: str | None = "en"
    cjk: str = "jieba"
    # Snowball stemmer for alphabetic Latin words (PyStemmer); identifiers stay whole.
    # Off by default: measured on Cranfield it lifts BM25 (nDCG@10 0.336 -> 0.353) but not the
    # default contract (0.418 -> 0.417), and on the sample set it lowers the contract (0.833 -> 0.811).
    stemmer: str | None = None
    # Unicode compatibility forms folded first (NFKC): full-width Latin letters and digits as typed
    # in Chinese text ('ＦａｓｔＡＰＩ', '１２３') match their ASCII form, compatibility ideographs
    # their unified one. A store analysed before it was recorded (None) keeps analysing without.
    normalize: str | None = "NFKC"

    def to_dict(self) -> dict:
        out = {"lowercase": self.lowercase, "stopwords": self.stopwords, "cjk": self.cjk, "stemmer": self.stemmer}
        return {**out, "normalize": self.normalize} if self.normalize else out  # as a store recorded before it

    @classmethod
    def from_dict(cls, data: dict) -> "AnalyzerConfig":
        return cls(**{"stemmer": None, "normalize": None, **data})


@lru_cache(maxsize=4)
def _stopwords(name: str | None) -> frozenset[str]:
    if not name:
        return frozenset()
    if name != "en":
        from ..errors import InputError

        raise InputError(f"unknown stopword list {name!r}: use 'en' or none")
    from .bm25 import _bm25s

    _bm25s()  # bm25s's package import, without the backends kbtool does not use
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@lru_cache(maxsize=4)
def stemmer(name: str | None):
    """The Snowball stemmer called ``name`` (None: no stemming); InputError naming the known ones."""
    if not name:
        return None
    import Stemmer

    try:
        return Stemmer.Stemmer(name)
    except KeyError:
        from ..errors import InputError

        raise InputError(f"unknown stemmer {name!r}: use one of {', '.join(Stemmer.algorithms())} or none") from None


_ALPHA = re.compile(r"[^\W\d_]+")


@lru_cache(maxsize=1)
def _jieba():
    """jieba, its prefix dictionary read from disk word by word (``lexicon.Lexicon``) rather than
    loaded whole: a question reads a few hundred entries of 580k. The same words either way."""
    import jieba

    from .._env import cache_dir
    from .lexicon import Lexicon, file_stamp

    jieba.setLogLevel(logging.WARNING)
    dt = jieba.dt
    # jieba caches its dictionary in /tmp/jieba.cache, shared by all users, unless told otherwise.
    dt.tmp_dir = cache_dir()
    if dt.dictionary is not None or dt.initialized:  # a dictionary of the caller's own: jieba's way
        jieba.initialize()
        return jieba
    source = os.path.join(os.path.dirname(jieba.__file__), jieba.DEFAULT_DICT_NAME)

    def full() -> dict:
        whole = jieba.Tokenizer()
        whole.tmp_dir = cache_dir()
        whole.initialize()
        return {**whole.FREQ, TOTAL: whole.total}

    lexicon = Lexicon(Path(cache_dir()) / "jieba-dict.sqlite",
                      file_stamp("jieba", jieba.__version__, os.path.getsize(source), int(os.path.getmtime(source))),
                      lambda: full().items(), full)
    with dt.lock:
        dt.FREQ, dt.total, dt.initialized = lexicon, lexicon[TOTAL], True
    return jieba


TOTAL = "\0total"  # the dictionary's total count, kept beside its words (no word starts with NUL)


_SEGMENTER: tuple = (None, None)  # (jieba's whole dictionary as a dict, a Tokenizer reading it)


def _segmenter():
    """What segments a CJK run: jieba's own tokenizer, or — once its on-disk dictionary has been
    loaded whole (``Lexicon.loaded``: a bulk analysis) — a Tokenizer over that same dict, which
    answers jieba's lookups without a Python call each (~30% of Chinese analysis time under a profiler).
    The same words."""
    global _SEGMENTER
    jb = _jieba()
    dt = jb.dt
    loaded = getattr(dt.FREQ, "loaded", None)
    table = loaded() if loaded is not None else None
    if table is None:
        return dt
    if _SEGMENTER[0] is not table:
        fast = jb.Tokenizer()
        fast.FREQ, fast.total, fast.initialized, fast.tmp_dir = table, dt.total, True, dt.tmp_dir
        _SEGMENTER = (table, fast)
    return _SEGMENTER[1]


def _cjk_tokens(run: str) -> list[str]:
    return [t for t in _segmenter().lcut_for_search(run) if _PART.fullmatch(t)]


_RUNS_KEPT = 1 << 17  # distinct runs whose tokens an analyzer keeps (then it starts again)


class _Runs(dict):
    """run -> its tokens (a tuple), analysed on first sight: a run's tokens depend on the run alone,
    so a word (stemmed, or segmented by jieba) is analysed once per analyzer, not once per use."""

    def __init__(self, analyse):
        super().__init__()
        self._analyse = analyse

    def __missing__(self, run: str) -> tuple[str, ...]:
        tokens = self._analyse(run)
        if len(self) >= _RUNS_KEPT:
            self.clear()
        self[run] = tokens
        return tokens


class Analyzer:
    """Text -> BM25 tokens. One instance per batch (``many``) or question: it keeps the tokens of
    the runs it has seen (``_Runs``), so a batch costs a dict lookup per known word."""

    def __init__(self, config: AnalyzerConfig | None = None):
        self.config = config or AnalyzerConfig()
        self._stop = _stopwords(self.config.stopwords)
        self._stem = stemmer(self.config.stemmer)
        self._runs = _Runs(self._run)

    def __call__(self, text: str) -> list[str]:
        ascii_only = text.isascii()
        if self.config.normalize and not ascii_only:
            text = unicodedata.normalize(self.config.normalize, text)
        if self.config.lowercase:
            text = text.lower()
        runs = (_ASCII_RUN if ascii_only else _RUN).findall(text)
        return list(chain.from_iterable(map(self._runs.__getitem__, runs)))

    def many(self, texts) -> list[list[str]]:
        """The tokens of each text (what ``index`` analyses chunks with)."""
        return [self(t) for t in texts]

    def _run(self, run: str) -> tuple[str, ...]:
        """The tokens of one run (a word or identifier, maybe holding CJK text)."""
        if not CJK.search(run):
            return tuple(self._latin(run))
        out: list[str] = []
        for piece in _CJK_SPLIT.split(run):
            if not piece:
                continue
            if CJK.match(piece):
                out.extend(_cjk_tokens(piece))
            else:
                out.extend(self._latin(piece))
        return tuple(out)

    def _latin(self, run: str) -> list[str]:
        parts = _PART.findall(run)
        tokens = [p for p in parts if p not in self._stop]
        if self._stem is not None:
            tokens = [self._stem.stemWord(t) if _ALPHA.fullmatch(t) else t for t in tokens]
        if len(parts) > 1:
            tokens.append(run.strip("-_./:"))
        return tokens
