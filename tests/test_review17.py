"""Review 17: defects found in several dense retrievers per store (index --add-model / --drop-model)."""

import json

from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.store import Store

from .conftest import write

runner = CliRunner()

FILES = {
    "sync.md": "# Sync conflicts\n\nWhen two people edit the same file before either upload reaches the server, "
               "the first upload wins and the second is kept beside it as a conflicted copy.\n",
    "billing.md": "# Invoices\n\nInvoices are sent on the first day of each month to the billing contact.\n",
}


def _store(tmp_path, embedder) -> Store:
    from kbtool.ingestion.pipeline import ingest

    for name, text in FILES.items():
        write(tmp_path / "d" / name, text)
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    assert store.is_indexed()
    return store


def test_a_model_that_cannot_embed_is_not_added_and_the_store_stays_queryable(tmp_path, embedder, monkeypatch):
    """`index --add-model` of an endpoint that is down (or a folder that holds no model) failed, yet
    recorded the model: the store was left 'behind' and every query refused until it was dropped."""
    store = _store(tmp_path, embedder)
    monkeypatch.setenv("KBTOOL_EMBED_RETRIES", "0")
    bogus = tmp_path / "notamodel"
    write(bogus / "config.json", "{}")
    for arg in ("down=openai:http://127.0.0.1:9/v1#m", f"bogus={bogus}"):
        r = runner.invoke(app, ["index", "--store", str(store.path), "--add-model", arg, "-q"])
        assert r.exit_code != 0, r.output
        assert "Traceback" not in r.output
        after = Store.open(store.path)
        assert after.dense_retrievers() == ["dense"], arg
        assert after.is_indexed(), arg
    r = runner.invoke(app, ["query", "who wins a sync conflict", "--store", str(store.path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hits"]
    r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", str(store.path), "-q",
                            "--add-model", f"bogus={bogus}"])
    assert r.exit_code != 0 and Store.open(store.path).dense_retrievers() == ["dense"]


def test_add_model_name_is_checked_not_taken_for_a_model_path(tmp_path, embedder):
    """`--add-model UPPER=use-m` and `--add-model =use-m` said "embedding model 'UPPER=use-m' is not a
    local folder": the NAME= part was silently read as part of a model path."""
    store = _store(tmp_path, embedder)
    for arg in ("UPPER=use-m", "=use-m", "a b=use-m"):
        r = runner.invoke(app, ["index", "--store", str(store.path), "--add-model", arg, "-q"])
        assert r.exit_code == 2, (arg, r.output)
        assert "not a local folder" not in r.output, r.output
        assert "--add-model" in r.output and "NAME" in r.output, r.output
    assert Store.open(store.path).dense_retrievers() == ["dense"]


def test_drop_model_dense_says_the_primary_cannot_be_dropped(tmp_path, embedder):
    """`--drop-model dense` said "the store has no model dense:dense"."""
    store = _store(tmp_path, embedder)
    r = runner.invoke(app, ["index", "--store", str(store.path), "--drop-model", "dense"])
    assert r.exit_code == 2, r.output
    assert "dense:dense" not in r.output
    assert "store's own model" in r.output and "--rebuild --model" in r.output, r.output


def test_rebuild_re_embeds_an_added_model_whose_width_changed(tmp_path, embedder):
    """`index --rebuild` forgot the width of the store's own model but kept an added model's: when the
    model behind dense:NAME changed width (an endpoint now serving another model), the rebuild failed
    with "rebuild with `kbtool index --model ... --rebuild`" - advice that would switch the store's
    own model."""
    store = _store(tmp_path, embedder)
    store.add_model("use-m")
    from kbtool.index import index

    with store.writing():
        index(store, embedder=embedder)
    with store.writing():
        store.manifest["models"]["use-m"]["dim"] = 256  # what the old model behind the name gave
        store.save_manifest()
    r = runner.invoke(app, ["query", "同步冲突", "--store", str(store.path)])
    assert r.exit_code != 0 and "--model" not in r.output and "--rebuild" in r.output, r.output
    r = runner.invoke(app, ["index", "--store", str(store.path), "--rebuild", "-q"])
    assert r.exit_code == 0, r.output
    after = Store.open(store.path)
    assert after.is_indexed() and after.manifest["models"]["use-m"]["dim"] == 512


def test_query_and_calibrate_gathering_give_the_same_hits_on_a_two_model_store(tmp_path, embedder):
    """A Chinese question on a store with use-m runs BM25 and dense:use-m only (MiniLM is weighed 0);
    calibrate and eval gather every retriever. Ranking, scores and decision agreed, but the hits did
    not: eval/calibrate's carried MiniLM's cosine (dense_score) where query's had None, and an English
    question's carried a dense:use-m score query never computed. One Answer, whoever gathers."""
    from kbtool.contract import default_contract
    from kbtool.query.pipeline import answer, gather, retrieve
    from kbtool.query.routing import store_retrievers
    from kbtool.query.scope import scope

    from .test_models import _store as two_model_store

    store = two_model_store(tmp_path, embedder)
    contract = default_contract()
    sc = scope(store, contract)
    for question in ("两个人同时修改同一个文件会怎样？", "What happens when two people edit the same file?"):
        by_query = retrieve(store, contract, question)
        cands = gather(store, contract, [question], sc=sc, retrievers=store_retrievers(store))[0]
        by_all = answer(store, contract, cands, sc=sc)
        assert by_query.weights == by_all.weights
        assert [h.to_dict() for h in by_query.hits] == [h.to_dict() for h in by_all.hits], question
        assert by_query.signals == by_all.signals and by_query.decision == by_all.decision


def test_index_after_a_rebuild_killed_before_an_added_model_records_its_width(tmp_path, embedder):
    """A rebuild forgets every model's width first; killed before it reached dense:use-m, it left
    that model's vectors in place, and the next `index` (nothing to embed) marked the model current
    with no width: no query was checked against it."""
    store = _store(tmp_path, embedder)
    store.add_model("use-m")
    from kbtool.index import index

    with store.writing():
        index(store, embedder=embedder)
    with store.writing():  # what `index --rebuild` killed after the store's own model leaves
        store.manifest["models"]["use-m"].update(dim=None, indexed_generation=-1)
        store.save_manifest()
    r = runner.invoke(app, ["index", "--store", str(store.path), "-q"])
    assert r.exit_code == 0, r.output
    after = Store.open(store.path)
    assert after.is_indexed() and after.manifest["models"]["use-m"]["dim"] == 512


def test_a_long_lived_store_survives_another_process_dropping_and_re_adding_a_model(tmp_path, embedder):
    """A Store kept open (kbtool serve, a Python user) held Chroma's handle of each collection: after
    `index --drop-model use-m` + `--add-model use-m` (or `index --rebuild`) elsewhere, every query it
    served raised chromadb's NotFoundError ("Collection [...] does not exist"), a raw traceback."""
    from kbtool.contract import default_contract
    from kbtool.index import index
    from kbtool.query.pipeline import retrieve

    store = _store(tmp_path, embedder)
    store.add_model("use-m")
    with store.writing():
        index(store, embedder=embedder)
    served = Store.open(store.path)
    question = "两个人同时修改同一个文件会怎样？"
    first = retrieve(served, default_contract(), question, embedder=embedder)
    assert "dense:use-m" in first.weights
    english = retrieve(served, default_contract(), "who wins a sync conflict", embedder=embedder)
    assert "dense" in english.weights
    other = Store.open(store.path)  # another writer
    other.drop_model("use-m")
    other.add_model("use-m")
    with other.writing():
        index(other, embedder=embedder, rebuild=True)
    again = retrieve(served, default_contract(), question, embedder=embedder)
    assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in first.hits]
    again = retrieve(served, default_contract(), "who wins a sync conflict", embedder=embedder)
    assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in english.hits]


def test_dropping_a_model_of_a_store_whose_chroma_folder_is_gone_does_not_make_it_current(tmp_path, embedder):
    """With chroma/ deleted the store is behind (its vectors are gone). Store.drop_model (and
    add_model, dropping a leftover collection) opened Chroma to drop the model's collection, which
    made an empty chroma/: the store then claimed current with no vector at all."""
    import shutil

    store = _store(tmp_path, embedder)
    store.add_model("use-m")
    from kbtool.index import index

    with store.writing():
        index(store, embedder=embedder)
    shutil.rmtree(store.path / "chroma")
    gone = Store.open(store.path)
    assert not gone.is_indexed()
    assert gone.drop_model("use-m")
    assert not Store.open(store.path).is_indexed()
    assert not (store.path / "chroma").exists()
    r = runner.invoke(app, ["index", "--store", str(store.path), "-q"])
    assert r.exit_code == 0, r.output
    after = Store.open(store.path)
    assert after.is_indexed() and after.vectors.count() == len(after.index_targets())


def test_dense_mode_signals_do_not_depend_on_what_else_eval_gathered(sample_store, embedder):
    """The dense mode of a contract whose model reads no BM25 signal runs no BM25 in a query; eval,
    gathering BM25 for its other modes, must give the same signals (BM25's statistics unseen)."""
    from kbtool.contract import AnswerabilityModel, default_contract
    from kbtool.query.pipeline import answer, gather, retrieve
    from kbtool.query.scope import scope
    from kbtool.query.retriever import contract_for_mode

    base = default_contract()
    base.decide.model = AnswerabilityModel(coefficients={"cosine": 4.0, "dense_margin": 3.0}, intercept=-2.0)
    dense = contract_for_mode(base, "dense")
    q = "What causes error TW-E5120 and how do I fix it?"
    alone = retrieve(sample_store, dense, q, embedder=embedder)
    sc = scope(sample_store, dense)
    both = gather(sample_store, dense, [q], sc=sc, embedder=embedder, retrievers=("dense", "bm25"))[0]
    assert both.term_weights is not None  # BM25 was gathered
    via_eval = answer(sample_store, dense, both, sc=sc)
    assert via_eval.signals == alone.signals
    assert via_eval.confidence == alone.confidence and via_eval.decision == alone.decision
