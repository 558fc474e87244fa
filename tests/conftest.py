"""Fixtures. Everything a test writes goes under tmp_path; the real bundled model, real Chroma
and real files are used throughout (small inputs keep it fast)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_corpus"


def _set_env(tmp_path_factory, mp) -> None:
    home = tmp_path_factory.getbasetemp() / "home"
    home.mkdir(exist_ok=True)
    mp.setenv("HOME", str(home))
    mp.setenv("KBTOOL_CACHE_DIR", str(home / "cache"))  # the ONNX export lands here, once per session
    mp.setenv("KBTOOL_STORE", str(home / "never-used-store"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("DO_NOT_TRACK", "1")
    mp.delenv("KBTOOL_RUNTIME", raising=False)
    mp.delenv("KBTOOL_EMBED_API_KEY", raising=False)
    mp.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _isolated_session_env(tmp_path_factory):
    """Before any session fixture loads the model: nothing is written outside the test folders."""
    mp = pytest.MonkeyPatch()
    _set_env(tmp_path_factory, mp)
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    _set_env(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="session")
def embedder():
    from kbtool.embed import load_embedder

    return load_embedder()


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory, embedder):
    """The bundled sample corpus, ingested once into a real store (read-only for tests)."""
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("sample")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE, corpus)
    store = Store.open(base / "kb", create=True)
    report = ingest(store, [corpus], embedder=embedder)
    assert not report.failed, report.failed
    return store


@pytest.fixture(scope="session")
def retriever(sample_store, embedder):
    from kbtool.query.retriever import Retriever

    return Retriever(sample_store, embedder)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
