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


def public_and_restricted_store(base: Path, public: dict, restricted: dict, meta: dict, embedder,
                                folder: str = "secret"):
    """A store of ``public`` documents and, from ``folder``, ``restricted`` ones ingested with
    ``meta`` (e.g. access tags): {name: text} each."""
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    for name, text in public.items():
        write(base / "public" / name, text)
    for name, text in restricted.items():
        write(base / folder / name, text)
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "public"], embedder=embedder).failed
    assert not ingest(store, [base / folder], IngestOptions(metadata=meta), embedder=embedder).failed
    return store


class FakeEmbedder:
    """A deterministic, instant embedder for logic tests (fusion, confidence, decisions,
    calibrate's search): each word and word bigram is hashed into one of 64 dimensions, and the
    vector is L2-normalised. Texts sharing words get a positive cosine; no model is loaded.

    Its model id uses the endpoint scheme (``openai:``) because a store accepts a model it can
    check without loading: a local id must be a real model folder. Nothing is ever sent anywhere:
    tests pass this embedder to ``ingest`` and ``gather`` themselves."""

    dim = 64
    max_tokens = 256
    runtime = "fake"

    def __init__(self):
        from kbtool.embed import EmbeddingSpec

        self.spec = EmbeddingSpec(model="openai:kbtool-test-fake-hash64", max_tokens=self.max_tokens)
        self.model_id = self.spec.model

    @staticmethod
    def _words(text: str) -> list[str]:
        import re

        # CJK characters count one by one, like the BM25 analyzer's unigrams
        return re.findall(r"[\u3400-\u9fff]|[^\W_]+(?:-[^\W_]+)*", text.lower())

    def count_tokens(self, text: str) -> int:
        return len(self._words(text))

    def _vector(self, text: str):
        import zlib

        import numpy as np

        v = np.zeros(self.dim, dtype=np.float32)
        words = self._words(text)
        for gram in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
            h = zlib.crc32(gram.encode())
            v[h % self.dim] += 1.0 if (h >> 8) % 2 else -1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def embed(self, texts, progress=None):
        import numpy as np

        out = np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)
        if progress:
            progress(len(texts))
        return out

    def embed_queries(self, texts):
        return self.embed(texts)

    def for_bulk(self, total: int):
        return self


@pytest.fixture(scope="session")
def fake_embedder():
    """A deterministic fake embedder (see ``FakeEmbedder``): logic tests run in milliseconds."""
    return FakeEmbedder()
