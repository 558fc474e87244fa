"""Review of issue 20 (large-store filtered search, memoised scopes, refusal explanations at
scale): regressions found by probing, each on a real store (fake embedder for logic)."""

from __future__ import annotations

import pytest

import kbtool.store.filtered as filtered
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.query.decide import missing_terms
from kbtool.query.pipeline import scope
from kbtool.query.preprocess import preprocess
from kbtool.store import Store

from .conftest import write


def contract(*sets):
    return load_contract(None, list(sets), search=False)


def _store(base, fake_embedder, docs: dict, secret: dict | None = None) -> Store:
    for name, text in docs.items():
        write(base / "docs" / name, text)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    if secret:
        for name, text in secret.items():
            write(base / "finance" / name, text)
        opts = IngestOptions(metadata={"access": "finance"})
        assert not ingest(store, [base / "finance"], opts, embedder=fake_embedder).failed
    return store


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
