"""Chinese question words left out of a question's BM25 terms (contract
``preprocess.cjk_question_words``, default drop): every Chinese page holds 的, 是, 怎么, 如何, so
they only blur which page answers. Query side only: the index is analysed as before."""

from __future__ import annotations

import numpy as np

from kbtool import load_contract
from kbtool.query.preprocess import CJK_QUESTION_WORDS, preprocess
from kbtool.store.analyzer import Analyzer

from .conftest import write


def test_question_words_are_dropped_after_segmentation_and_kept_on_request():
    analyzer = Analyzer()
    drop = preprocess("如何在 FastAPI 中启用跨域请求？", load_contract(None, search=False))
    keep = preprocess("如何在 FastAPI 中启用跨域请求？", load_contract(None, ["preprocess.cjk_question_words=keep"],
                                                                  search=False))
    everything = analyzer("如何在 FastAPI 中启用跨域请求？")
    assert {"如何", "在", "中"} <= set(everything)
    assert drop.bm25_terms(analyzer) == [t for t in everything if t not in {"如何", "在", "中"}]
    assert "fastapi" in drop.bm25_terms(analyzer) and "跨域" in drop.bm25_terms(analyzer)
    assert keep.bm25_terms(analyzer) == everything
    # an English question is analysed as it always was (its stopwords are the analyzer's own)
    en = preprocess("how do I enable CORS in FastAPI", load_contract(None, search=False))
    assert not en.drop_question_words and en.bm25_terms(analyzer) == analyzer(en.bm25_text)


def test_the_list_holds_function_words_only():
    # content words a docs question needs are never dropped (bm25s's Chinese list drops 使用, 需要, 不同)
    for word in ("使用", "需要", "不同", "设置", "参数", "请求", "中间件", "依赖"):
        assert word not in CJK_QUESTION_WORDS
    assert {"的", "怎么", "如何", "什么", "可以", "吗"} <= CJK_QUESTION_WORDS


def test_bm25_scores_a_question_as_if_its_question_words_were_not_asked(tmp_path, fake_embedder):
    """Through the real pipeline and a real BM25 index: the scores of "怎么 … 呢" equal those of the
    bare content words, and the question words no longer favour the page that repeats them."""
    from kbtool import retrieve
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    write(tmp_path / "docs" / "cors.md", "# 跨域\n\n启用跨域资源共享需要添加中间件。\n")
    write(tmp_path / "docs" / "faq.md", "# 常见问题\n\n怎么办？如何做？什么是什么？可以吗？怎么样呢？这是我们的问题。\n")
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    ingest(store, [tmp_path / "docs"], embedder=fake_embedder)
    bm25 = load_contract(None, ["retrieve.fusion.method=bm25"], search=False)
    kept = load_contract(None, ["retrieve.fusion.method=bm25", "preprocess.cjk_question_words=keep"], search=False)
    asked = retrieve(store, bm25, "怎么启用跨域呢？", embedder=fake_embedder)
    bare = retrieve(store, bm25, "启用跨域", embedder=fake_embedder)
    assert [(h.chunk_id, round(h.bm25_score, 6)) for h in asked.hits] == [(h.chunk_id, round(h.bm25_score, 6)) for h in bare.hits]
    assert asked.hits[0].doc_id == "cors.md"
    before = retrieve(store, kept, "怎么启用跨域呢？", embedder=fake_embedder)
    faq = [h.bm25_score for h in before.hits if h.doc_id == "faq.md"]
    assert faq and faq[0] > 0 and "faq.md" not in [h.doc_id for h in asked.hits if h.bm25_score]
    assert np.isfinite(asked.confidence)


def test_a_chinese_question_naming_an_identifier_has_a_rule_of_its_own():
    """如何在 FastAPI 中启用 CORS: the identifier wants BM25's exact match, the Chinese words the
    multilingual model; the English identifier rule (BM25 + MiniLM) applies only without use-m."""
    from kbtool.query.routing import rule_applied

    c = load_contract(None, search=False)
    p = preprocess("如何在 FastAPI 中启用 CORS？", c)
    assert set(p.types) == {"identifier", "cjk", "cjk_identifier"}
    with_m = ("dense", "bm25", "dense:use-m")
    assert c.retriever_weights(set(p.types), with_m) == {"bm25": 0.5, "dense:use-m": 0.5}
    assert rule_applied(c, [p.types], with_m) == ["cjk_identifier"]
    assert c.retriever_weights(set(p.types), ("dense", "bm25")) == {"dense": 0.3, "bm25": 0.7}
    assert rule_applied(c, [p.types], ("dense", "bm25")) == ["identifier"]
    # neither an English identifier question nor a Chinese one without an identifier is touched
    assert "cjk_identifier" not in preprocess("how do I enable CORS in FastAPI", c).types
    assert preprocess("怎么允许跨域请求", c).types == ["cjk"]
    # a store whose own model reads Chinese (model_multilingual) skips it, as it skips the cjk rules
    multi = load_contract(None, ["retrieve.model_multilingual=true"], search=False)
    assert rule_applied(multi, [p.types], with_m) == ["identifier"]
