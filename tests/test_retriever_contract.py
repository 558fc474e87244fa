"""``Retriever`` runs the contract it is given: its candidate depth and fusion come from there."""

import pytest

from kbtool.contract import load_contract
from kbtool.query import candidates as candidates_mod
from kbtool.query.retriever import Retriever


@pytest.fixture
def spy(monkeypatch):
    seen: list[dict] = []
    gather = candidates_mod.Gatherer.gather

    def recording(self, processed, **kw):
        out = gather(self, processed, **kw)
        seen.append({"depth": kw["depth"], "dense": [len(c.dense_rank) for c in out],
                     "bm25": [len(c.bm25_rank) for c in out]})
        return out

    monkeypatch.setattr(candidates_mod.Gatherer, "gather", recording)
    return seen


def test_retriever_gathers_the_contracts_candidates(sample_store, embedder, tmp_path, spy):
    path = tmp_path / "kbtool.yaml"
    path.write_text("contract_version: 1\nretrieve:\n  top_k: 2\n  candidates: 3\n")
    retriever = Retriever(sample_store, embedder, contract=load_contract(path))
    for mode in ("contract", "hybrid", "bm25"):
        hits = retriever.search("sync conflict resolution", mode=mode, top_k=2)
        assert hits and len(hits) <= 2
    assert spy and all(s["depth"] == 3 for s in spy), spy
    assert all(n <= 3 for s in spy for n in s["dense"] + s["bm25"]), spy
    assert any(n == 3 for s in spy for n in s["bm25"]), spy  # the sample corpus has more than 3 matches


def test_hybrid_is_plain_rrf_with_the_default_k_and_rrf_k_sets_another(sample_store, embedder):
    q = "refund window for European customers"
    retriever = Retriever(sample_store, embedder)
    for mode, k in (("hybrid", 60), ("rrf:1", 1)):
        hit = retriever.search(q, mode=mode, top_k=1)[0]
        expected = sum(1 / (k + r) for r in (hit.dense_rank, hit.bm25_rank) if r)
        assert hit.score == pytest.approx(expected, abs=1e-6)
