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
