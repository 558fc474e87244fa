"""Review of issue 20 (large-store filtered search, memoised scopes, refusal explanations at
scale): regressions found by probing, each on a real store (fake embedder for logic)."""

from __future__ import annotations

import pytest

import kbtool.store.filtered as filtered
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.explain import missing_terms
from kbtool.query.scope import scope
from kbtool.query.preprocess import preprocess
from kbtool.store import Store

from .conftest import write
from .test_access import build


def contract(*sets):
    return load_contract(None, list(sets), search=False)


def _store(base, fake_embedder, docs: dict, secret: dict | None = None) -> Store:
    return build(base, fake_embedder, docs, secret or {})


def test_an_identifier_inside_a_longer_one_is_not_reported_missing(tmp_path, fake_embedder):
    """The analyser emits ``client.sync.timeout_ms`` and ``tw-e1042/tw-e1043`` whole, not the
    identifier a question names inside them: BM25's vocabulary alone says a chunk that holds
    ``sync.timeout_ms`` never mentions it."""
    store = _store(tmp_path, fake_embedder, {
        "cfg.md": "# Config\n\nSet client.sync.timeout_ms to 5000 when the link is slow.\n",
        "err.md": "# Errors\n\nThe agent shows TW-E1042/TW-E1043 when the proxy drops the upload.\n",
    })
    c = contract()
    for question, ident in [("What does sync.timeout_ms do?", "sync.timeout_ms"),
                            ("How do I fix TW-E1042?", "TW-E1042")]:
        p = preprocess(question, c)
        assert [i["text"] for i in p.identifiers] == [ident]
        assert store.any_chunk_contains(ident)
        assert ident not in missing_terms(store, p, [], None)
    # an identifier no chunk holds is still missing, and a longer one does not hold a prefix of it
    p = preprocess("How do I fix TW-E104?", c)
    assert missing_terms(store, p, [], None) == ["TW-E104"]


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


def test_suggestions_of_a_restricted_caller_do_not_depend_on_hidden_identifiers(tmp_path, fake_embedder):
    """A restricted caller gets what a store without the hidden documents gives: siblings of a
    missing identifier that only hidden chunks hold must not crowd out the one it may read (the
    nearest 100 in sorted order, and the 6 closest in spelling, were picked among every term)."""
    from kbtool.query.explain import suggestions

    public = {"tickets.md": "# Tickets\n\nTicket KB-1-900 covers the proxy that drops uploads.\n"}
    secret = {f"codes{j}.md": f"# Codes {j}\n\n" + " ".join(f"KB-1-{n}" for n in range(100 + 100 * j, 200 + 100 * j)) + "\n"
              for j in range(4)}
    full = _store(tmp_path / "full", fake_embedder, public, secret)
    alone = _store(tmp_path / "alone", fake_embedder, public)
    c = contract("access.principals={guest: [public], cfo: [finance]}")
    got = suggestions(full, ["KB-1-260"], scope(full, c, [], "guest").allowed, [], None)
    want = suggestions(alone, ["KB-1-260"], scope(alone, c, [], "guest").allowed, [], None)
    assert want == ["instead of 'KB-1-260', the index has: kb-1-900"]
    assert got == want
    # the caller who may read them is offered siblings among them
    cfo = suggestions(full, ["KB-1-260"], scope(full, c, [], "cfo").allowed, [], None)
    assert len(cfo) == 1 and "kb-1-2" in cfo[0] and "kb-1-900" not in cfo[0]


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


def test_a_chroma_url_with_credentials_is_refused_without_showing_them(tmp_path):
    """--chroma-url http://user:password@host or ?token=...: refused (credentials come from the
    environment), and the refusal, printed to a terminal or a CI log, must not repeat them."""
    from typer.testing import CliRunner

    from kbtool.cli import app

    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    for url in ("http://admin:hunter2@127.0.0.1:1", "http://127.0.0.1:1/?token=hunter2",
                "http://admin:hunter2@127.0.0.1:99999", "http://127.0.0.1:1/#hunter2"):
        r = CliRunner().invoke(app, ["ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb"), "--chroma-url", url])
        assert r.exit_code == 2, r.output
        assert "--chroma-url" in r.output and "hunter2" not in r.output, r.output
        assert not (tmp_path / "kb").exists()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_a_chroma_timeout_that_is_no_number_of_seconds_is_refused(value, tmp_path, monkeypatch):
    """$KBTOOL_CHROMA_TIMEOUT=nan or inf passed the check (not <= 0) and reached httpx: against a live
    server, ValueError 'Invalid value NaN' / OverflowError 'timestamp out of range' instead of one line."""
    from typer.testing import CliRunner

    from kbtool.cli import app
    from kbtool.errors import UsageError
    from kbtool.store.chroma_server import timeout

    monkeypatch.setenv("KBTOOL_CHROMA_TIMEOUT", value)
    with pytest.raises(UsageError, match="KBTOOL_CHROMA_TIMEOUT"):
        timeout()
    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb"),
                                 "--chroma-url", "http://127.0.0.1:1"])
    assert r.exit_code == 2 and "KBTOOL_CHROMA_TIMEOUT" in r.output, r.output


@pytest.mark.slow
@pytest.mark.parametrize("server", [True, False])
def test_a_malformed_chroma_headers_setting_is_one_line_without_its_token(server, tmp_path):
    """$CHROMA_SERVER_HEADERS (how the README says to send a server credentials) that chromadb
    refuses: chromadb's import raised pydantic's ValidationError, printed as an 'Internal error'
    whose text repeats the value — the bearer token. One line naming the setting instead. A
    subprocess: chromadb reads the setting once, on import."""
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    write(tmp_path / "c" / "a.md", "# A\n\nhello\n")
    env = {**os.environ, "CHROMA_SERVER_HEADERS": '{"Authorization": "Bearer s3cret-token-77"',
           "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "kbtool", "ingest", str(tmp_path / "c"), "--store", str(tmp_path / "kb")]
    if server:
        args += ["--chroma-url", "http://127.0.0.1:1"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "s3cret-token-77" not in out and "Internal error" not in out, out
    assert "CHROMA_" in out and "chroma_server_headers" in out, out


def test_vectors_a_query_loaded_while_a_writer_indexed_are_not_held_past_the_write(tmp_path, fake_embedder, monkeypatch):
    """Queries on threads while another thread of the process ingests (tests/test_threads.py): a
    query loading a filter's vectors before the writer's vectors land, and holding them after the
    writer's manifest save dropped what was held, kept them for the whole generation — the new
    chunks never found by the exact path in that process."""
    from kbtool.chunk import chunk
    from kbtool.index import index

    monkeypatch.setattr(filtered, "NATIVE_MAX", 0)
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
