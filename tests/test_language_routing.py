"""A question is searched among the documents in its language (contract ``retrieve.language``):
a Chinese question among the documents whose ``lang`` is Chinese, any other among the rest;
documents without a language stay in both. In a store holding FastAPI's English and Chinese
docs, 18 of 385 top-5 hits of the English questions were Chinese pages (79 of 505 the other way)."""

from __future__ import annotations

import pytest

from kbtool import load_contract, retrieve
from kbtool.query.scope import language_class

from .conftest import write

PAGES = {"cors.md": ("# CORS\n\nCORSMiddleware allows cross-origin requests from other origins.\n",
                     "# 跨域\n\n使用 CORSMiddleware 允许来自其他源的跨域请求。\n"),
         "files.md": ("# Upload files\n\nUploadFile stores large uploads on disk.\n",
                      "# 上传文件\n\nUploadFile 会把大文件存到磁盘上。\n")}


@pytest.fixture()
def two_languages(tmp_path, fake_embedder):
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    for name, (en, zh) in PAGES.items():
        write(tmp_path / "en" / name, en)
        write(tmp_path / "zh" / name, zh)
    write(tmp_path / "shared" / "glossary.md", "# Glossary\n\nCORSMiddleware: the CORS middleware. 跨域中间件。\n")
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    for lang in ("en", "zh"):
        opts = IngestOptions(metadata={"lang": lang}, id_prefix=f"{lang}/")
        assert not ingest(store, [tmp_path / lang], opts, embedder=fake_embedder).failed
    assert not ingest(store, [tmp_path / "shared"], IngestOptions(id_prefix="shared/"), embedder=fake_embedder).failed
    return store


def _docs(store, route, question, fake_embedder, filters=()):
    c = load_contract(None, [f"retrieve.language.route={route}", "retrieve.top_k=10"], search=False)
    return [h.doc_id for h in retrieve(store, c, question, embedder=fake_embedder, filters=list(filters)).hits]


def test_each_question_is_searched_in_its_language_and_the_unlabelled_documents(two_languages, fake_embedder):
    store = two_languages
    off_en = _docs(store, "off", "CORSMiddleware cross-origin requests", fake_embedder)
    assert any(d.startswith("zh/") for d in off_en)  # the identifier pulls the Chinese page in
    for route in ("prefer", "only"):
        en = _docs(store, route, "CORSMiddleware cross-origin requests", fake_embedder)
        zh = _docs(store, route, "怎么用 CORSMiddleware 允许跨域请求", fake_embedder)
        assert en and not any(d.startswith("zh/") for d in en), (route, en)
        assert zh and not any(d.startswith("en/") for d in zh), (route, zh)
        assert "shared/glossary.md" in en and "shared/glossary.md" in zh  # no language: in both


def test_prefer_falls_back_to_every_document_and_only_does_not(two_languages, fake_embedder):
    store = two_languages
    zh_only = ["lang=zh"]  # a caller's filter leaving no English page: an English question
    assert _docs(store, "prefer", "UploadFile large uploads", fake_embedder, zh_only)  # searched among what is there
    assert _docs(store, "only", "UploadFile large uploads", fake_embedder, ["lang=zh", "doc_id=zh/*"]) == []


def test_off_in_yaml_and_language_codes():
    assert load_contract(None, ["retrieve.language.route=off"], search=False).retrieve.language.route == "off"
    for value, cls in (("zh", "cjk"), ("zh-Hant", "cjk"), ("zh_CN", "cjk"), ("ja", "cjk"), ("ko-KR", "cjk"),
                       ("en", "other"), ("fr", "other"), ("de-CH", "other")):
        assert language_class(value) == cls, value


def test_calibrate_scores_each_question_in_its_language_as_eval_does(two_languages, fake_embedder, tmp_path):
    """Calibrate gathers through the same pipeline: a question's score there, for a setting, is
    what eval measures on the contract calibrate writes for it — language routing included."""
    import json

    import numpy as np

    from kbtool.evaluation.calibrate import CONFIGS, Search, gathered
    from kbtool.evaluation.questions import load_questions

    from .test_calibrate_logic import _assert_eval_measures

    rows = [("e1", "CORSMiddleware cross-origin requests", "en/cors.md"), ("e2", "UploadFile large uploads disk", "en/files.md"),
            ("e3", "cross-origin middleware", "en/cors.md"), ("z1", "怎么用 CORSMiddleware 允许跨域请求", "zh/cors.md"),
            ("z2", "UploadFile 大文件存到哪里", "zh/files.md"), ("z3", "跨域请求", "zh/cors.md")]
    path = write(tmp_path / "qs.jsonl", "".join(json.dumps({"id": i, "question": q, "relevant": [{"doc": d}]},
                                                           ensure_ascii=False) + "\n" for i, q, d in rows))
    qs = load_questions(path)
    contract = load_contract(None, search=False)
    items = gathered(two_languages, qs, contract, k=10, embedder=fake_embedder)
    assert all(it.c.scope is not None for it in items)
    zh = [it for it in items if it.q.id.startswith("z")]
    assert all(not c.startswith("en/") for it in zh for c in it.c.ids)  # gathered in its language
    search = Search(contract, items, "ndcg@10", min_count=1)
    rng = np.random.default_rng(3)
    for ci in range(0, len(CONFIGS), 3):
        wmap = {g: int(rng.integers(len(search.grid))) for g in ("identifier", "cjk", "cjk_identifier", "other")}
        _assert_eval_measures(two_languages, qs, contract, search, items, ci, wmap, fake_embedder)
