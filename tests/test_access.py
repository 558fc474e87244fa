"""Access that holds under probing: everything a restricted caller gets (lint, eval output, BM25
scores and confidence, counts) depends only on the documents it may see. Small stores built with
the fake embedder (milliseconds per query)."""

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import dump_yaml, load_contract
from kbtool.ingestion.pipeline import IngestOptions, ingest
from kbtool.store import Store

from .conftest import write

runner = CliRunner()

PUBLIC = {
    "guide.md": "# Guide\n\nThe quarterly report lists revenue by region and the merger timeline.\n",
    "faq.md": "# FAQ\n\nUploads fail when the storage quota is exhausted; delete old versions.\n",
}
SECRET = {"merger.md": "# Merger\n\nThe merger is valued at 42 million euros; the revenue memo stays internal.\n"}


def contract(*sets):
    return load_contract(None, list(sets), search=False)


def build(base, fake_embedder, public: dict, secret: dict) -> Store:
    for name, text in public.items():
        write(base / "public" / name, text)
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "public"], embedder=fake_embedder).failed
    if secret:
        for name, text in secret.items():
            write(base / "finance" / name, text)
        opts = IngestOptions(metadata={"access": "finance"})
        assert not ingest(store, [base / "finance"], opts, embedder=fake_embedder).failed
    return store


@pytest.fixture(scope="module")
def kb(tmp_path_factory, fake_embedder):
    return build(tmp_path_factory.mktemp("acc"), fake_embedder, PUBLIC, SECRET)


@pytest.fixture(scope="module")
def kb_public(tmp_path_factory, fake_embedder):
    """The same public documents in a store that never held the secret one."""
    return build(tmp_path_factory.mktemp("acc-pub"), fake_embedder, PUBLIC, {})


@pytest.fixture
def fake_model(monkeypatch, fake_embedder):
    """CLI commands embed with the fake embedder (the store records its model id)."""
    import kbtool.embed

    monkeypatch.setattr(kbtool.embed, "load_embedder", lambda *a, **k: fake_embedder)


def _contract_file(tmp_path):
    return write(tmp_path / "c.yaml", dump_yaml(contract("access.principals={guest: [public], cfo: [finance]}")))


# ---- lint: restricted documents read exactly as absent ones ------------------------------------
def test_eval_lint_as_a_principal_treats_restricted_documents_as_absent(kb, tmp_path, fake_model):
    c = _contract_file(tmp_path)
    q = write(tmp_path / "q.jsonl", "".join(json.dumps(r) + "\n" for r in [
        {"id": "real", "question": "merger value", "relevant": [{"doc": "merger.md", "evidence": "42 million euros"}]},
        {"id": "wrong", "question": "merger value", "relevant": [{"doc": "merger.md", "evidence": "43 million euros"}]},
        {"id": "made-up", "question": "merger value", "relevant": [{"doc": "invented.md", "evidence": "42 million"}]},
    ]))
    args = ["eval", str(q), "--store", str(kb.path), "--contract", str(c), "-q", "--json", "--modes", "bm25"]
    lint = {}
    for who in (["--principal", "guest"], ["--allow", "public"]):
        r = runner.invoke(app, args + who)
        assert r.exit_code == 0, r.output
        lint[who[0]] = json.loads(r.stdout)["lint"]
        # each restricted label reads exactly as the invented one: no existence or content oracle
        assert len(lint[who[0]]) == 3 and all("which the store does not hold" in m for m in lint[who[0]])
        assert "does not occur" not in r.stderr + r.stdout
    r = runner.invoke(app, args + ["--principal", "cfo"])
    cfo = json.loads(r.stdout)["lint"]
    assert len(cfo) == 2 and any("43 million" in m for m in cfo) and any("invented.md" in m for m in cfo)


def test_lint_against_store_sees_only_the_visible_documents(kb, tmp_path):
    from kbtool.evaluation.questions import lint_against_store, load_questions
    from kbtool.query.pipeline import visible_documents

    c = contract("access.principals={guest: [public], cfo: [finance]}")
    assert visible_documents(kb, c) is None
    assert visible_documents(kb, c, "guest") == {"guide.md", "faq.md"}
    assert visible_documents(kb, c, "cfo") == {"guide.md", "faq.md", "merger.md"}
    assert visible_documents(kb, contract("access.untagged=hidden"), allow=["finance"]) == {"merger.md"}
    q = write(tmp_path / "q.jsonl", json.dumps(
        {"id": "w", "question": "x", "relevant": [{"doc": "merger.md", "evidence": "43 million euros"}]}) + "\n")
    for visible, says in ((None, "does not occur in merger.md"), (visible_documents(kb, c, "guest"), "does not hold")):
        qs = load_questions(q)
        lint_against_store(qs, kb, visible)
        assert len(qs.issues) == 1 and says in str(qs.issues[0])
