from kbtool.store.analyzer import Analyzer, AnalyzerConfig


def test_english_words_lowercased_and_stopwords_dropped():
    assert Analyzer()("The Agent QUEUES changes") == ["agent", "queues", "changes"]


def test_stopwords_can_be_turned_off():
    assert Analyzer(AnalyzerConfig(stopwords=None))("the agent") == ["the", "agent"]


def test_identifiers_are_kept_whole_and_as_parts():
    tokens = Analyzer()("Error TW-E4031 at sync.timeout_ms via POST /v2/shares in 3.4.1")
    for token in ["tw-e4031", "tw", "e4031", "sync.timeout_ms", "timeout", "v2/shares", "3.4.1"]:
        assert token in tokens


def test_chinese_is_segmented_with_jieba():
    tokens = Analyzer()("如何解决同步冲突？")
    assert "同步" in tokens and "冲突" in tokens
    assert all(t.strip("？") == t for t in tokens)  # punctuation is dropped


def test_mixed_chinese_and_latin():
    tokens = Analyzer()("错误TW-E4031表示存储配额已满")
    assert "tw-e4031" in tokens
    assert "存储" in tokens and "配额" in tokens


def test_identifiers_inside_chinese_text_stay_whole():
    tokens = Analyzer()("如何在FastAPI中启用CORSMiddleware并设置max_age？")
    for token in ["fastapi", "corsmiddleware", "max_age"]:
        assert token in tokens
    assert not any(t in tokens for t in ("fast", "api", "cors"))


def test_full_width_letters_and_digits_match_their_ascii_form():
    # as typed with a Chinese input method: ＦａｓｔＡＰＩ, １２３, an ideographic space
    assert Analyzer()("ＦａｓｔＡＰＩ　的端口８０００") == Analyzer()("FastAPI 的端口8000")
    assert "fastapi" in Analyzer()("ＦａｓｔＡＰＩ")


def test_a_store_analysed_before_normalisation_keeps_analysing_without_it():
    # its index holds 'ｆａｓｔａｐｉ': the question must be analysed the way the index was
    old = AnalyzerConfig.from_dict({"lowercase": True, "stopwords": "en", "cjk": "jieba", "stemmer": None})
    assert old.normalize is None and "normalize" not in old.to_dict()
    assert Analyzer(old)("ＦａｓｔＡＰＩ") == ["ｆａｓｔａｐｉ"]
    assert AnalyzerConfig().to_dict()["normalize"] == "NFKC"


# ---- jieba's dictionary and wordfreq's Chinese list read word by word (kbtool.store.lexicon) ---------
def _chinese_texts() -> list[str]:
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "eval_sets"
    qs = [json.loads(x)["text"] for x in (root / "cmrc2018" / "trial" / "queries.jsonl").read_text("utf-8").splitlines()]
    paras = [json.loads(x)["text"] for x in (root / "cmrc2018" / "trial" / "corpus.jsonl").read_text("utf-8").splitlines()]
    return qs[:300] + paras[:20] + ["如何在FastAPI中启用CORS？", "ＦａｓｔＡＰＩ　的请求体", "错误TW-E4031表示存储配额已满"]


def test_jieba_words_from_disk_are_the_words_of_its_whole_dictionary(monkeypatch):
    import jieba

    import kbtool.store.lexicon as lexicon
    from kbtool.store.analyzer import _jieba

    jb = _jieba()
    assert isinstance(jb.dt.FREQ, lexicon.Lexicon)
    monkeypatch.setattr(lexicon, "FULL_AFTER", 10**9)  # every lookup from the file
    whole = jieba.Tokenizer()
    whole.initialize()
    for text in _chinese_texts():
        assert jb.lcut_for_search(text) == whole.lcut_for_search(text), text
        assert jb.lcut(text, HMM=False) == whole.lcut(text, HMM=False), text
    assert jb.dt.total == whole.total


def test_a_lexicon_loads_whole_after_many_lookups_and_rebuilds_for_a_new_stamp(tmp_path, monkeypatch):
    import kbtool.store.lexicon as lexicon

    table = {"同步": 5.0, "冲突": 3.0, "同": 0.0}
    built = []

    def build():
        built.append(1)
        return table.items()

    lex = lexicon.Lexicon(tmp_path / "t.sqlite", "v1", build, lambda: dict(table))
    assert lex.get("同步") == 5.0 and "同" in lex and "异" not in lex and lex.get("异", 7) == 7
    assert lex._full is None and len(built) == 1
    monkeypatch.setattr(lexicon, "FULL_AFTER", 3)
    assert lex["冲突"] == 3.0 and lex._full is not None  # the fourth lookup loaded it
    assert lexicon.Lexicon(tmp_path / "t.sqlite", "v1", build, dict).get("同步") == 5.0 and len(built) == 1
    table["同步"] = 9.0
    assert lexicon.Lexicon(tmp_path / "t.sqlite", "v2", build, dict).get("同步") == 9.0 and len(built) == 2


def test_a_lexicon_without_a_writable_cache_works_from_memory(tmp_path):
    import kbtool.store.lexicon as lexicon

    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder would be")  # no folder can be made there (even as root)
    lex = lexicon.Lexicon(blocker / "t.sqlite", "v1", lambda: [("词", 2.0)], dict)
    assert lex.get("词") == 2.0 and "字" not in lex and blocker.is_file()


def test_chinese_word_frequencies_from_disk_are_wordfreqs():
    import math

    from wordfreq import get_frequency_dict

    from kbtool.query.signals import zipf
    from kbtool.store.analyzer import CJK, _jieba

    zh = get_frequency_dict("zh")
    words = {w for text in _chinese_texts() for w in _jieba().lcut(text) if CJK.search(w)}
    assert len(words) > 1000
    for w in words:
        want = max(0.0, math.log10(zh[w]) + 9) if zh.get(w, 0) > 0 else 0.0
        assert zipf(w) == want, w


def test_english_word_frequencies_from_disk_are_wordfreqs_zipf_frequency():
    """A one-token English term is read from the on-disk table (no wordfreq import): the very
    number wordfreq's ``zipf_frequency`` gives, for its list's top 5,000 and 30,000 other words
    (all 289k agree; a sample keeps the test short), words joined by
    underscores (identifiers: one token, mostly unlisted) and unlisted strings; other terms (digits,
    dots, accents) still go to wordfreq."""
    import random

    from wordfreq import get_frequency_dict, top_n_list, zipf_frequency

    from kbtool.query import signals

    listed = [w for w in get_frequency_dict("en") if signals._ONE_TOKEN.match(w)]
    assert len(listed) > 250_000
    rnd = random.Random(7)
    listed = listed[:5000] + rnd.sample(listed[5000:], 30_000)
    top = [w for w in top_n_list("en", 2000) if signals._ONE_TOKEN.match(w)]
    joined = ["_".join(rnd.sample(top, rnd.randint(2, 3))) for _ in range(2000)]
    made_up = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rnd.randint(1, 14))) for _ in range(4000)]
    for w in listed + joined + made_up + ["i", "my", "laptop", "mangum", "add_middleware"]:
        if signals._ONE_TOKEN.match(w):
            assert signals.zipf(w) == zipf_frequency(w, "en"), w
    assert signals.zipf("my") > 6 and signals.zipf("mangum") < 3 and signals.zipf("add_middleware") == 0.0
    for w in ["0.110", "404", "app.add_middleware", "don't", "café", "_x", "x_"]:
        assert not signals._ONE_TOKEN.match(w)
        assert signals.zipf(w) == zipf_frequency(w, "en"), w
