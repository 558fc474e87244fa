"""The analyzer's fast path (runs analysed once per analyzer, ASCII runs by a plain pattern, jieba
over its loaded dictionary) gives exactly the tokens of the plain implementation it replaced, kept
here as the reference: every token, in order, on real and random text, under every setting."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbtool.store import analyzer as an
from kbtool.store.analyzer import Analyzer, AnalyzerConfig

ROOT = Path(__file__).resolve().parent.parent

_RUN = re.compile(r"[^\W_]+(?:[-_./:][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
_ALPHA = re.compile(r"[^\W\d_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_CJK_SPLIT = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)")


def reference(config: AnalyzerConfig, text: str) -> list[str]:
    """The analyzer as it was (kbtool 2026-12-07): token by token, jieba's own tokenizer."""
    stop = an._stopwords(config.stopwords)
    stem = an.stemmer(config.stemmer)

    def latin(run: str) -> list[str]:
        parts = _PART.findall(run)
        tokens = [p for p in parts if p not in stop]
        if stem is not None:
            tokens = [stem.stemWord(t) if _ALPHA.fullmatch(t) else t for t in tokens]
        if len(parts) > 1:
            tokens.append(run.strip("-_./:"))
        return tokens

    if config.normalize and not text.isascii():
        text = unicodedata.normalize(config.normalize, text)
    if config.lowercase:
        text = text.lower()
    out: list[str] = []
    for match in _RUN.finditer(text):
        run = match.group(0)
        if _CJK.search(run):
            for piece in _CJK_SPLIT.split(run):
                if not piece:
                    continue
                if _CJK.match(piece):
                    out.extend(t for t in an._jieba().lcut_for_search(piece) if _PART.fullmatch(t))
                else:
                    out.extend(latin(piece))
        else:
            out.extend(latin(run))
    return out


CONFIGS = [
    AnalyzerConfig(),
    AnalyzerConfig(stemmer="english"),
    AnalyzerConfig(stopwords=None),
    AnalyzerConfig(stopwords=None, stemmer="english"),
    AnalyzerConfig(lowercase=False, stemmer="english"),
    AnalyzerConfig(normalize=None),
    AnalyzerConfig(stemmer="german", normalize=None),
]
HAND = [
    "", "   ", "The Agent QUEUES changes", "Error TW-E5120 at sync.timeout_ms via POST /v2/shares in 3.4.1",
    "错误TW-E5120表示存储配额已满", "如何在FastAPI中启用CORSMiddleware并设置max_age？", "ＦａｓｔＡＰＩ　的端口８０００",
    "ﬁle ﬂow Ⅻ ① ㎏ ｶﾀｶﾅ 𝐁𝐨𝐥𝐝", "naïve café über Straße résumé ÉCOLE", "日本語のテキストとカタカナ、한국어 텍스트",
    "a--b __init__ ./x/ :y: -z- a.b.c. TW_E5120_ x/y:z-w_v.u", "running runs ran easily fairly generously",
    "ＴＷ－Ｅ５１２０ 与 tw-e5120 相同吗", "同步冲突 同步冲突 同步冲突 sync sync", "数字123和字母abc混排ABC456",
    "İstanbul ǅ ß ﬃ", "x" * 300 + "同" * 300,
]


def _texts() -> list[str]:
    files = sorted(p for p in (ROOT / "sample_corpus").rglob("*")
                   if p.is_file() and p.suffix in {".md", ".txt", ".rst", ".html", ".csv", ".json", ".yaml", ".yml"})
    assert len(files) >= 10 and any(p.parent.name == "zh" for p in files)
    pages = [p.read_text("utf-8", errors="replace") for p in files]
    # whole pages, and their paragraphs (the size of chunks)
    return HAND + pages + [para for page in pages for para in page.split("\n\n")]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.stopwords}-{c.stemmer}-{c.lowercase}-{c.normalize}")
def test_the_same_tokens_as_the_reference_on_real_text(config):
    texts = _texts()
    analyzer = Analyzer(config)
    got = analyzer.many(texts)
    assert got == [reference(config, t) for t in texts]
    assert [Analyzer(config)(t) for t in texts[:40]] == got[:40]  # one question at a time: the same
    assert sum(map(len, got)) > 10_000


def test_jieba_over_its_loaded_dictionary_segments_as_jieba(monkeypatch):
    import kbtool.store.lexicon as lexicon

    texts = [t for t in _texts() if an.CJK.search(t)]
    lex = an._jieba().dt.FREQ
    assert isinstance(lex, lexicon.Lexicon)
    monkeypatch.setattr(lexicon, "FULL_AFTER", 0)
    lex.get("同步")  # the next lookup loads the whole table, as a bulk analysis does
    assert lex.loaded() is not None
    assert an._segmenter() is not an._jieba().dt and an._segmenter().FREQ is lex.loaded()
    for config in (AnalyzerConfig(), AnalyzerConfig(stemmer="english")):
        assert Analyzer(config).many(texts) == [reference(config, t) for t in texts]
    lex["新词语"] = 5  # a word set in this process (jieba's add_word): back to jieba's own tokenizer
    try:
        assert lex.loaded() is None and an._segmenter() is an._jieba().dt
    finally:
        lex._added.pop("新词语")


def test_a_full_run_cache_starts_again_with_the_same_tokens(monkeypatch):
    monkeypatch.setattr(an, "_RUNS_KEPT", 3)
    text = "alpha beta gamma delta alpha TW-E5120 同步冲突 beta epsilon"
    analyzer = Analyzer(AnalyzerConfig(stemmer="english"))
    assert analyzer.many([text] * 3) == [reference(AnalyzerConfig(stemmer="english"), text)] * 3
    assert len(analyzer._runs) <= 3


_ALPHABET = st.sampled_from(list("abcXYZ019 -_./:\n\t,;!?'\"()") + list("éßİǅﬁ同步冲突配额已满的。，、？！")
                            + list("ａＢ１２　－．カナ한국ⅫⅫ①"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(_ALPHABET, max_size=60), st.sampled_from(CONFIGS))
def test_the_same_tokens_as_the_reference_on_random_text(text, config):
    assert Analyzer(config)(text) == reference(config, text)
