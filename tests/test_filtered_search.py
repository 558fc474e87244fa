"""Filtered dense search at scale (kbtool.store.filtered): a large store searches a filter's chunks
exactly over their cached vectors, or by an unfiltered ANN search deep enough and then filtered —
never with Chroma's ``where``, which costs 130-240 ms per query at 100k chunks. Each way must give
what the engine's own filter gives. The sample store is small, so the size limits are lowered."""

from __future__ import annotations

import pytest

import kbtool.store.filtered as filtered
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.pipeline import retrieve
from kbtool.query.scope import scope
from kbtool.store import Store

from .conftest import write
from .test_access import build, contract

QUESTIONS = ["How do I fix error TW-E1042?", "laptop drops off the Wi-Fi", "refund for an annual plan",
             "Which regions store data?", "rotate an API token"]


def _same(a, b) -> bool:
    return [c for c, _ in a] == [c for c, _ in b] and all(abs(x - y) < 1e-5 for (_, x), (_, y) in zip(a, b))


@pytest.fixture()
def large(monkeypatch):
    """Make the sample store count as large: every filtered search goes the large-store way."""
    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    return monkeypatch


@pytest.mark.parametrize("spec", ["dir=manual/**", "dir=policies/**|security/**", "filetype=md"])
def test_exact_and_oversampled_search_equal_the_engines_own_filter(sample_store, embedder, large, spec):
    c = load_contract(search=False)
    sc = scope(sample_store, c, [spec])
    assert 0 < len(sc.allowed) < sample_store.chunk_total()
    vecs = embedder.embed_queries(QUESTIONS)
    depth = 10
    native = [[x for x in lst if x[0] in sc.allowed][:depth]
              for lst in sample_store.vectors.search(vecs, depth + sc.extra_dense, sc.allowed_docs)]
    searcher = sample_store._filtered
    before = dict(searcher.stats)
    exact = sample_store.dense_search(vecs, depth, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert searcher.stats["exact"] == before["exact"] + 1
    large.setattr(filtered, "EXACT_MAX", 0)
    over = sample_store.dense_search(vecs, depth, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert searcher.stats["oversampled"] == before["oversampled"] + 1
    for n, e, o in zip(native, exact, over):
        assert [c for c, _ in e] == [c for c, _ in n]  # HNSW on 177 vectors is exact
        assert [c for c, _ in o] == [c for c, _ in n]
        assert _same(e, n) and _same(o, n)
        assert all(cid in sc.allowed for cid, _ in e + o)


def test_a_filter_too_rare_for_the_oversampled_search_falls_back_to_exact(sample_store, embedder, large):
    large.setattr(filtered, "EXACT_MAX", 0)
    large.setattr(filtered, "OVERSAMPLE", 0.01)  # the unfiltered search is far too shallow
    allowed = set(sorted(c for c, _, _ in sample_store.chunk_metadata())[:3])
    vecs = embedder.embed_queries(QUESTIONS[:2])
    fb = sample_store._filtered.stats["fallback"]
    got = sample_store.dense_search(vecs, 10, None, allowed=allowed)
    assert sample_store._filtered.stats["fallback"] == fb + 2
    assert [sorted(c for c, _ in lst) for lst in got] == [sorted(allowed)] * 2


def test_held_vectors_stay_within_the_row_budget_and_follow_the_generation(sample_store, embedder, large):
    large.setattr(filtered, "BYTE_BUDGET", 40 * 384 * 4)  # 40 vectors
    searcher = filtered.FilteredSearch()
    ids = sorted(c for c, _, _ in sample_store.chunk_metadata())
    a, b = set(ids[:30]), set(ids[30:60])
    vecs = embedder.embed_queries(QUESTIONS[:1])
    searcher.search(sample_store, sample_store.vectors, "dense", vecs, 5, a, None, 0)
    searcher.search(sample_store, sample_store.vectors, "dense", vecs, 5, b, None, 0)
    assert len(searcher._held) == 1  # 60 vectors over a budget of 40: the older filter's vectors left
    (gen, _, key_id), = searcher._held
    assert gen == sample_store.generation() and key_id == id(b)


def test_answers_of_a_large_store_equal_the_engines_filter_through_the_pipeline(sample_store, embedder, monkeypatch):
    c = load_contract(search=False)
    want = [retrieve(sample_store, c, q, filters=["dir=manual/**"], embedder=embedder) for q in QUESTIONS]
    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    got = [retrieve(sample_store, c, q, filters=["dir=manual/**"], embedder=embedder) for q in QUESTIONS]
    for w, g in zip(want, got):
        assert [h.chunk_id for h in g.hits] == [h.chunk_id for h in w.hits]
        assert g.decision == w.decision
        assert g.confidence == pytest.approx(w.confidence, abs=1e-4)


def test_a_scope_is_worked_out_once_per_generation(sample_store):
    c = load_contract(search=False)
    one = scope(sample_store, c, ["dir=manual/**"])
    assert scope(sample_store, c, ["dir=manual/**"]) is one
    assert scope(sample_store, c, ["dir=policies/**"]) is not one
    # the same chunks as deciding chunk by chunk
    want = {cid for cid, doc, _ in sample_store.chunk_metadata() if doc.startswith("manual/")}
    assert one.allowed == want and one.allowed_docs == sorted({d for _, d, _ in sample_store.chunk_metadata()
                                                               if d.startswith("manual/")})


# Review of issue 20 (large-store filtered search, memoised scopes, refusal explanations at
# scale): regressions found by probing, each on a real store (fake embedder for logic).
def _store(base, fake_embedder, docs: dict, secret: dict | None = None) -> Store:
    return build(base, fake_embedder, docs, secret or {})


class _OtherModel:
    """The fake embedder's model id serving other vectors (what ``index --rebuild`` is for: the
    model behind a name changed)."""

    def __init__(self, base):
        self.base, self.spec, self.model_id = base, base.spec, base.model_id
        self.dim, self.max_tokens, self.runtime = base.dim, base.max_tokens, "fake"

    def count_tokens(self, text):
        return self.base.count_tokens(text)

    def embed(self, texts, progress=None):
        return self.base.embed(texts, progress)[:, ::-1].copy()  # the same width, other directions

    def embed_queries(self, texts):
        return self.embed(texts)

    def for_bulk(self, total):
        return self


DOCS = {f"d{i}.md": f"# Doc {i}\n\nTopic {i}: the agent {w} after a network timeout; restart it.\n"
        for i, w in enumerate(["stops syncing", "drops uploads", "loses the token", "rejects the proxy",
                               "fills the quota", "forgets the key", "slows down", "crashes"])}


def _native(store, vecs, sc, depth):
    """What Chroma's own filter gives (the small-store way), filtered to the scope."""
    return [[x for x in lst if x[0] in sc.allowed][:depth]
            for lst in store.vectors.search(vecs, depth + sc.extra_dense, sc.allowed_docs)]


def _ids_scores(lists):
    return [[(c, round(s, 4)) for c, s in lst] for lst in lists]


def test_vectors_held_for_a_filter_do_not_outlive_a_rebuild_in_the_same_process(tmp_path, fake_embedder, monkeypatch):
    from kbtool.index import index

    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    store = _store(tmp_path, fake_embedder, DOCS)
    sc = scope(store, contract(), ["doc_id=d0.md|d1.md|d2.md|d3.md|d4.md"])
    assert 0 < len(sc.allowed) < store.chunk_total()
    vecs = fake_embedder.embed_queries(["the agent stops syncing"])
    before = store.dense_search(vecs, 3, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert _ids_scores(before) == _ids_scores(_native(store, vecs, sc, 3))
    other = _OtherModel(fake_embedder)
    index(store, embedder=other, rebuild=True)
    assert store.generation() == store.generation() and scope(store, contract(), ["doc_id=d0.md|d1.md|d2.md|d3.md|d4.md"]) is sc
    vecs = other.embed_queries(["the agent stops syncing"])
    got = store.dense_search(vecs, 3, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert _ids_scores(got) == _ids_scores(_native(store, vecs, sc, 3))


def test_masks_held_by_bm25_survive_concurrent_request_threads(tmp_path, fake_embedder):
    """``kbtool serve`` answers on several threads over one BM25 index: masks of more scopes than it
    keeps, asked for at once, must not fail a request ('dictionary changed size during iteration')."""
    import sys
    import threading

    store = _store(tmp_path, fake_embedder, DOCS)
    index = store.bm25()
    ids = sorted(c for c, _, _ in store.chunk_metadata())
    scopes = [set(ids[i:i + 3]) for i in range(len(ids))] * 4  # more distinct sets than are held
    scopes = [set(s) for s in scopes]
    errors: list[str] = []

    def work(offset: int) -> None:
        try:
            for n in range(3000):
                s = scopes[(n + offset) % len(scopes)]
                assert index.held("mask", s).sum() == len(s)
        except Exception as exc:  # noqa: BLE001 - the failure a request would see
            errors.append(repr(exc))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i * 7,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []


def test_the_exact_filtered_search_breaks_ties_by_id_at_the_depth(tmp_path, fake_embedder, monkeypatch):
    """Copies of one text (the same vector) tied at the last place a question keeps: the chunks kept
    are the first by id, as ``dense_search`` promises and the read-only engine does, not whichever
    a partial sort leaves there."""
    import random

    texts = ["The agent stops syncing after a network timeout.", "The agent stops syncing.",
             "The agent restarts after a timeout."]
    rnd = random.Random(7)
    docs = {f"d{i:03d}.md": f"# Notice\n\n{rnd.choice(texts)}\n" for i in range(120)}
    docs["zz.md"] = "# Other\n\nInvoices are sent monthly.\n"
    store = _store(tmp_path, fake_embedder, docs)
    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    sc = scope(store, contract(), ["doc_id=d*"])
    vecs = fake_embedder.embed_queries(["the agent stops syncing after a network timeout"])
    full = store.dense_search(vecs, len(sc.allowed), sc.allowed_docs, allowed=sc.allowed)[0]
    assert len({round(x, 5) for _, x in full}) == 3  # three scores, each shared by many chunks
    for depth in range(1, len(full)):
        got = store.dense_search(vecs, depth, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)[0]
        assert [c for c, _ in got] == [c for c, _ in full[:depth]], depth


def test_vectors_a_query_loaded_while_a_writer_indexed_are_not_held_past_the_write(tmp_path, fake_embedder, monkeypatch):
    """Queries on threads while another thread of the process ingests (tests/test_threads.py): a
    query loading a filter's vectors before the writer's vectors land, and holding them after the
    writer's manifest save dropped what was held, kept them for the whole generation — the new
    chunks never found by the exact path in that process."""
    from kbtool.chunk import chunk
    from kbtool.index import index

    import kbtool.store.models as models

    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
    monkeypatch.setattr(models, "SCAN_MAX", 0)  # Chroma's index, not the scan (tests/test_scan_search.py)
    store = _store(tmp_path, fake_embedder, DOCS)
    write(tmp_path / "public" / "new.md", "# New\n\nThe copperkettle agent stops syncing after a timeout.\n")
    assert not ingest(store, [tmp_path / "public"], IngestOptions(parse_only=True), embedder=fake_embedder).failed
    chunk(store, embedder=fake_embedder)  # the catalog holds the new chunk; its vector is not made yet
    sc = scope(store, contract(), ["doc_id=new.md|d0.md"])
    assert "new.md#0" in sc.allowed and not store.chunk_vectors(["new.md#0"])
    vecs = fake_embedder.embed_queries(["copperkettle agent stops syncing"])
    engine, get = store.vectors, store.vectors.get

    def get_then_writer_indexes(ids):
        got = get(ids)  # what the engine held when this query read it
        monkeypatch.setattr(engine, "get", get)
        index(store, embedder=fake_embedder)  # meanwhile the writer thread embeds, writes, saves the manifest
        return got

    monkeypatch.setattr(engine, "get", get_then_writer_indexes)
    store.dense_search(vecs, 3, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert store.is_indexed() and store.chunk_vectors(["new.md#0"])
    got = store.dense_search(vecs, 3, sc.allowed_docs, allowed=sc.allowed, extra=sc.extra_dense)
    assert _ids_scores(got) == _ids_scores(_native(store, vecs, sc, 3))
    assert got[0][0][0] == "new.md#0"


def test_a_mistyped_filter_key_mode_or_retriever_gets_a_did_you_mean(tmp_path, fake_embedder):
    """`--filter lnag=en` names 'lang', `--mode hybird` names 'hybrid', as `kbtool qurey` names
    'query'; nothing close: no guess. A missing added model is matched among added models only."""
    from kbtool.errors import ContractError, InputError, UsageError
    from kbtool.query.retriever import contract_for_mode

    write(tmp_path / "d" / "a.md", "# A\n\nThe agent syncs files.\n")
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "d"], IngestOptions(metadata={"lang": "en"}), embedder=fake_embedder).failed
    c = load_contract(None, [], search=False)
    with pytest.raises(InputError, match=r"unknown filter key 'lnag' \(did you mean 'lang'\?\): known keys are .*lang"):
        scope(store, c, ["lnag=en"])
    with pytest.raises(InputError) as info:
        scope(store, c, ["colour=red"])
    assert "did you mean" not in str(info.value)
    with pytest.raises(UsageError, match=r"unknown mode 'hybird' \(did you mean 'hybrid'\?\)"):
        contract_for_mode(c, "hybird")
    with pytest.raises(ContractError) as info:
        retrieve(store, contract_for_mode(c, "dense:use-n"), "agent", embedder=fake_embedder)
    assert "no retriever dense:use-n (it has" in str(info.value)  # not "did you mean 'dense'"
