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
