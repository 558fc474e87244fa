"""postprocess.diversity (MMR over the chunk vectors, a per-document cap) and eval's distinct@K,
on a small real store: one page of many near-identical windows, and other pages."""

import json

import pytest

from kbtool.chunk import ChunkParams
from kbtool.contract import load_contract
from kbtool.errors import ContractError
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.metrics import distinct
from kbtool.evaluation.questions import load_questions
from kbtool.ingestion.pipeline import ingest
from kbtool.query.pipeline import retrieve
from kbtool.query.postprocess import diversify
from kbtool.store import Store

from .conftest import ROOT, write

SAMPLE_SET = ROOT / "eval_sets" / "sample.jsonl"

QUESTION = "backup retention policy snapshots"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
# Windows that differ by a few words: near-identical to the embedder, not dropped by dedup.
RUNBOOK = "# Backup runbook\n\n" + "\n\n".join(
    f"## Step {i}\n\nThe backup retention policy keeps nightly snapshots for thirty days before pruning them. "
    f"Checklist item {w}: ask the {w} team to sign {w} form." for i, w in enumerate(WORDS)) + "\n"
OTHERS = {
    "legal.md": "# Legal hold\n\nA legal hold overrides the backup retention policy: snapshots under hold are never pruned.\n",
    "cost.md": "# Storage cost\n\nLonger backup retention means more snapshots and a larger storage bill each month.\n",
    "restore.md": "# Restoring\n\nTo restore, pick a snapshot inside the retention window and run the restore command.\n",
    "other.md": "# Holidays\n\nThe office is closed on public holidays.\n",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, fake_embedder):
    base = tmp_path_factory.mktemp("diversity")
    write(base / "docs" / "runbook.md", RUNBOOK)
    for name, text in OTHERS.items():
        write(base / "docs" / name, text)
    lines = [{"id": "q1", "question": QUESTION, "relevant": ["legal.md"]},
             {"id": "q2", "question": "how long are nightly snapshots kept", "relevant": ["runbook.md"]}]
    path = write(base / "q.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    return store, path


def ask(kb, fake_embedder, *sets, top_k=5):
    return retrieve(kb[0], load_contract(None, list(sets), search=False), QUESTION, embedder=fake_embedder, top_k=top_k)


def test_mmr_brings_more_documents_into_the_top_k_and_keeps_the_best_first(kb, fake_embedder):
    plain = ask(kb, fake_embedder)
    assert [h.doc_id for h in plain.hits].count("runbook.md") >= 4  # the windows crowd the top 5
    for lam in ("0.5", "0.7"):
        mmr = ask(kb, fake_embedder, f"postprocess.diversity.mmr_lambda={lam}")
        assert mmr.hits[0].chunk_id == plain.hits[0].chunk_id
        assert len({h.doc_id for h in mmr.hits}) > len({h.doc_id for h in plain.hits})
        assert [h.rank for h in mmr.hits] == list(range(1, len(mmr.hits) + 1))
        moved = mmr.trace["diversity"]["moved"]
        assert moved and all(after < before for cid, before, after in moved if not cid.startswith("runbook"))
    # lambda 1: pure relevance, the fused order
    same = ask(kb, fake_embedder, "postprocess.diversity.mmr_lambda=1")
    assert [h.chunk_id for h in same.hits] == [h.chunk_id for h in plain.hits]


def test_per_document_cap_holds(kb, fake_embedder):
    for cap in (1, 2):
        got = ask(kb, fake_embedder, f"postprocess.diversity.max_per_document={cap}")
        docs = [h.doc_id for h in got.hits]
        assert max(docs.count(d) for d in docs) <= cap and len(docs) == 5
        assert got.trace["diversity"]["dropped"] and all(d == "runbook.md" for _, d in got.trace["diversity"]["dropped"])
    both = ask(kb, fake_embedder, "postprocess.diversity.max_per_document=1", "postprocess.diversity.mmr_lambda=0.3")
    assert len({h.doc_id for h in both.hits}) == len(both.hits)


def test_off_is_identical(kb, fake_embedder):
    plain = ask(kb, fake_embedder)
    off = ask(kb, fake_embedder, "postprocess.diversity.mmr_lambda=null", "postprocess.diversity.max_per_document=null")
    assert json.dumps(off.to_dict(), sort_keys=True) == json.dumps(plain.to_dict(), sort_keys=True)
    assert "diversity" not in plain.trace


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_lambda_out_of_range_is_a_contract_error(value):
    with pytest.raises(ContractError, match=r"postprocess\.diversity\.mmr_lambda"):
        load_contract(None, [f"postprocess.diversity.mmr_lambda={value}"], search=False)
    with pytest.raises(ContractError, match=r"postprocess\.diversity\.max_per_document"):
        load_contract(None, ["postprocess.diversity.max_per_document=0"], search=False)


def test_diversify_by_hand():
    # a and a2 point the same way; b is orthogonal. Relevance: a 1.0, a2 0.5, b 0.0 (min-max).
    items = [("a", 3.0), ("a2", 2.0), ("b", 1.0)]
    vecs = {"a": [1.0, 0.0], "a2": [1.0, 0.0], "b": [0.0, 1.0]}
    docs = {"a": "d1", "a2": "d1", "b": "d2"}.get
    # lambda 0.5: after a, a2 = 0.5*0.5 - 0.5*1 = -0.25, b = 0.5*0 - 0 = 0 -> b first
    got, trace = diversify(items, vecs, docs, mmr_lambda=0.5, max_per_document=None, keep=3)
    assert [c for c, _ in got] == ["a", "b", "a2"] and trace["moved"] == [["b", 3, 2], ["a2", 2, 3]]
    # lambda 0.8: a2 = 0.8*0.5 - 0.2 = 0.2 > b = 0 -> the fused order
    got, _ = diversify(items, vecs, docs, mmr_lambda=0.8, max_per_document=None, keep=3)
    assert [c for c, _ in got] == ["a", "a2", "b"]
    got, trace = diversify(items, vecs, docs, mmr_lambda=None, max_per_document=1, keep=3)
    assert [c for c, _ in got] == ["a", "b"] and trace["dropped"] == [["a2", "d1"]]


def test_distinct_metric_by_hand():
    docs = ["d1", "d1", "d2", "d1", "d3", "d2"]
    assert distinct(docs, 1) == 1.0
    assert distinct(docs, 3) == 2.0
    assert distinct(docs, 5) == 3.0
    assert distinct(docs, 10) == 3.0  # K beyond the list: the whole list
    assert distinct([], 10) == 0.0


def test_eval_reports_distinct_documents(kb, fake_embedder):
    store, path = kb
    qs = load_questions(path)
    cfg = EvalConfig(modes=["contract"], ks=[1, 5])
    plain = evaluate(store, qs, cfg, contract=load_contract(None, [], search=False), embedder=fake_embedder)
    capped = evaluate(store, qs, cfg, embedder=fake_embedder,
                      contract=load_contract(None, ["postprocess.diversity.max_per_document=1"], search=False))
    # by hand from the same run's hits: the mean over both questions of distinct documents in the top 5
    answers = [retrieve(store, load_contract(None, [], search=False), q.question, embedder=fake_embedder, top_k=100)
               for q in qs.questions]
    want = sum(len({h.doc_id for h in a.hits[:5]}) for a in answers) / len(answers)
    data = plain.to_dict()
    assert data["diversity"]["contract"]["distinct@5"] == pytest.approx(want)
    assert data["diversity"]["contract"]["distinct@1"] == 1.0
    assert data["per_question"][0]["modes"]["contract"]["distinct"]["distinct@5"] == len({h.doc_id for h in answers[0].hits[:5]})
    assert capped.to_dict()["diversity"]["contract"]["distinct@5"] == 5.0  # five documents, one hit each
    assert capped.to_dict()["diversity"]["contract"]["distinct@5"] > want


def test_mmr_first_hits_do_not_depend_on_how_many_are_asked(sample_store, embedder):
    """query asks for top_k (5), eval for 100: MMR picks from the contract's own window either way
    (before, its relevance was scaled over the window read for the hits asked, and 108 of 149
    sample questions got other first 5 hits from eval than from query at lambda 0.6)."""
    from kbtool.query.pipeline import answer, gather
    from kbtool.query.scope import scope

    c = load_contract(None, ["postprocess.diversity.mmr_lambda=0.6"], search=False)
    sc = scope(sample_store, c)
    qs = [q.question for q in load_questions(SAMPLE_SET).questions][::3]
    grown = 0
    for cand in gather(sample_store, c, qs, sc=sc, embedder=embedder):
        five = [h.chunk_id for h in answer(sample_store, c, cand, sc=sc).hits]
        many = answer(sample_store, c, cand, sc=sc, top_k=100).hits
        grown += len(many) > c.retrieve.top_k + 20  # eval's window is wider than the contract's
        assert [h.chunk_id for h in many[:5]] == five
        assert [h.chunk_id for h in answer(sample_store, c, cand, sc=sc, top_k=10).hits[:5]] == five
    assert grown > len(qs) / 2


def test_diversify_pool_by_hand():
    # a, b, c alike; d unlike. Pool of 3: MMR over a, b, c only, then d in fused order.
    vec = {"a": [1.0, 0.0], "b": [1.0, 0.0], "c": [0.9, 0.1], "d": [0.0, 1.0]}
    items = [("a", 1.0), ("b", 0.9), ("c", 0.8), ("d", 0.1)]
    whole, _ = diversify(items, vec, lambda c: c, mmr_lambda=0.5, max_per_document=None, keep=4)
    assert [c for c, _ in whole][:2] == ["a", "d"]  # d's novelty outweighs its low score
    pooled, _ = diversify(items, vec, lambda c: c, mmr_lambda=0.5, max_per_document=None, keep=4, pool=3)
    assert [c for c, _ in pooled] == ["a", "b", "c", "d"]  # d waits until the pool is used up
    capped, trace = diversify(items, vec, lambda c: "x" if c in "ad" else c, mmr_lambda=0.5, max_per_document=1,
                              keep=4, pool=2)
    assert [c for c, _ in capped] == ["a", "b", "c"] and trace["dropped"] == [["d", "x"]]


# Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
# pinned by a test that failed before its fix.
@pytest.fixture(scope="module")
def many(tmp_path_factory, fake_embedder):
    """Eight documents of eight short paragraphs each (one chunk a paragraph): 64 chunks."""
    base = tmp_path_factory.mktemp("r21many")
    words = ["backup", "restore", "volume", "checksum", "archive", "snapshot", "replica", "schedule"]
    for d in range(8):
        paras = [f"Paragraph {d}-{p}: the {words[(d + p) % 8]} job copies the {words[(d * p) % 8]} data and checks "
                 f"the {words[(d + 2 * p) % 8]} before the {words[p % 8]} run of team {d} is complete."
                 for p in range(8)]
        write(base / "docs" / f"doc{d}.md", f"# Doc {d}\n\n" + "\n\n".join(paras) + "\n")
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=40, overlap=0)).failed
    return store


@pytest.mark.parametrize("setting", ["postprocess.diversity.mmr_lambda=0.5", "postprocess.diversity.mmr_lambda=0.2"])
def test_mmr_picks_the_same_top_k_whatever_top_k_the_caller_asks(many, fake_embedder, setting):
    # MMR scaled relevance over, and picked from, a window of the caller's top_k + 20: eval (which
    # asks for 100) and calibrate ranked other hits than `kbtool query` for the same contract
    c = load_contract(None, [setting], search=False)
    for q in ["backup volume checksum", "restore snapshot archive", "replica schedule team",
              "checksum before the run is complete"]:
        small = retrieve(many, c, q, embedder=fake_embedder)
        large = retrieve(many, c, q, embedder=fake_embedder, top_k=60)
        assert [h.chunk_id for h in large.hits][:len(small.hits)] == [h.chunk_id for h in small.hits], q
        assert (small.decision, small.confidence) == (large.decision, large.confidence)
