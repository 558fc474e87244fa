"""postprocess.rerank: the contract section, the stage after fusion (kbtool.query.rerank) and its
three backends with real components: a tiny cross-encoder built here, a scripted rerank server,
the store's own dense model; eval and calibrate running through it."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.contract import Contract, default_contract, dump_yaml, load_contract, validate_contract
from kbtool.errors import ContractError, ModelError
from kbtool.query import rerank

from .conftest import ROOT, write

runner = CliRunner()
SAMPLE_SET = ROOT / "eval_sets" / "sample.jsonl"
QUESTIONS = ["How do I reset my password?", "What causes error TW-E5120 and how do I fix it?",
             "How do I export my data?", "Which regions can store customer data?"]


def settings(**kw):
    return validate_contract({"contract_version": 1, "postprocess": {"rerank": kw}}).postprocess.rerank


# ---- a scripted rerank server ---------------------------------------------------------------
def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def overlap(question: str, text: str) -> float:
    """The server's score: how many distinct question words the text holds."""
    return float(len(words(question) & words(text)))


class Script:
    """What the server does next and what it saw."""

    def __init__(self):
        self.requests: list[dict] = []
        self.fail = []  # statuses (or 'sleep', 'badjson', 'badindex') for the next requests, in order
        self.sleep = 0.0


class Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        s = self.script
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        s.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        action = s.fail.pop(0) if s.fail else None
        if action == "sleep":
            time.sleep(s.sleep)
        elif isinstance(action, int):
            return self._send(action, json.dumps({"error": f"scripted {action}"}).encode())
        elif action == "badjson":
            return self._send(200, b"<html>not json</html>")
        cohere = self.path.endswith("/v1/rerank")
        texts = body["documents"] if cohere else body["texts"]
        scored = sorted(((i, overlap(body["query"], t)) for i, t in enumerate(texts)), key=lambda x: -x[1])
        if action == "badindex":
            scored[0] = (len(texts) + 3, 1.0)
        if cohere:
            out = {"results": [{"index": i, "relevance_score": v} for i, v in scored[: body["top_n"]]]}
        else:
            out = [{"index": i, "score": v} for i, v in scored]
        self._send(200, json.dumps(out).encode())


@pytest.fixture
def server():
    script = Script()
    handler = type("H", (Handler,), {"script": script})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield script
    httpd.shutdown()
    httpd.server_close()


# A fused list and its rows, by hand: the expected orders are computable.
FUSED = [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.1)]
ROWS = {"a": {"text": "nothing relevant here", "prefix": ""},
        "b": {"text": "reset the password", "prefix": ""},
        "c": {"text": "password token", "prefix": "Reset"},  # the prefix is scored too (embed_text)
        "d": {"text": "reset password token", "prefix": ""}}
Q = "reset password token"


def rows_of(ids):
    return {c: ROWS[c] for c in ids if c in ROWS}


def test_tei_server_order_weight_and_request(server, monkeypatch):
    s = settings(backend="http", url=server.url, top_n=3)
    out, info = rerank.apply(None, s, Q, FUSED, rows_of, {})
    # overlap a 0, b 2, c 3 (prefix "Reset" counts): c, b, a; d stays below, not reranked
    assert [c for c, _ in out] == ["c", "b", "a", "d"]
    scores = [v for _, v in out]
    assert scores == sorted(scores, reverse=True) and out[-1][1] < 0 <= out[-2][1]
    assert info["scores"] == {"a": 0.0, "b": 2.0, "c": 3.0} and info["backend"] == "http" and info["scored"] == 3
    req = server.requests[0]
    assert req["path"] == "/rerank" and req["auth"] is None
    assert req["body"] == {"query": Q, "texts": ["nothing relevant here", "reset the password", "Reset\n\npassword token"],
                           "raw_scores": False}
    # weight 0.5: final = 0.5 * minmax(rerank) + 0.5 * minmax(fused): a 0.5, b 0.5833, c 0.5 -> b, a, c (tie: fused order)
    out, _ = rerank.apply(None, settings(backend="http", url=server.url, top_n=3, weight=0.5), Q, FUSED, rows_of, {})
    assert [c for c, _ in out] == ["b", "a", "c", "d"]
    assert [round(v, 4) for _, v in out[:3]] == [0.5833, 0.5, 0.5]
    # the key from the environment, as a bearer token
    monkeypatch.setenv("KBTOOL_RERANK_API_KEY", "sekret")
    rerank.apply(None, s, Q, FUSED, rows_of, {})
    assert server.requests[-1]["auth"] == "Bearer sekret"


def test_cohere_shape_model_and_own_key_variable(server, monkeypatch):
    monkeypatch.setenv("MY_RERANK_KEY", "k2")
    s = settings(backend="http", url=server.url + "/", api="cohere", model="rerank-v3", api_key_env="MY_RERANK_KEY",
                 top_n=4)
    out, _ = rerank.apply(None, s, Q, FUSED, rows_of, {})
    assert [c for c, _ in out] == ["c", "d", "b", "a"]  # c 3, d 3 (fused order breaks the tie), b 2, a 0
    req = server.requests[0]
    assert req["path"] == "/v1/rerank" and req["auth"] == "Bearer k2"
    assert set(req["body"]) == {"model", "query", "documents", "top_n"}
    assert req["body"]["model"] == "rerank-v3" and req["body"]["top_n"] == 4 and len(req["body"]["documents"]) == 4


def test_cache_scores_each_pair_once(server):
    s, cache = settings(backend="http", url=server.url, top_n=3), {}
    rerank.apply(None, s, Q, FUSED, rows_of, cache)
    out, info = rerank.apply(None, s, Q, list(reversed(FUSED)), rows_of, cache)  # d, c, b now on top
    assert len(server.requests) == 2 and server.requests[1]["body"]["texts"] == ["reset password token"]
    assert info["scored"] == 1 and info["cached"] == 2
    assert [c for c, _ in out] == ["d", "c", "b", "a"]


def test_retry_after_one_503(server):
    server.fail = [503]
    out, _ = rerank.apply(None, settings(backend="http", url=server.url, top_n=3, retries=1), Q, FUSED, rows_of, {})
    assert len(server.requests) == 2 and out[0][0] == "c"


def test_timeout(server):
    server.fail, server.sleep = ["sleep"], 2.0
    t = time.perf_counter()
    with pytest.raises(ModelError, match=r"rerank server http://127\.0\.0\.1:\d+/rerank did not answer \(timed out\) "
                                         r"after 1 tries: .*postprocess\.rerank\.url"):
        rerank.apply(None, settings(backend="http", url=server.url, timeout_s=0.3, retries=0), Q, FUSED, rows_of, {})
    assert time.perf_counter() - t < 1.5


@pytest.mark.parametrize("action, message", [
    (400, r"refused the request: HTTP 400: scripted 400$"),
    (401, r"HTTP 401: scripted 401 \(set \$KBTOOL_RERANK_API_KEY, postprocess\.rerank\.api_key_env\)"),
    ("badjson", r"did not answer with \[\{index, score\}\]: is postprocess\.rerank\.api \(tei\) the server's API\?"),
    ("badindex", r"returned index 6 for 3 texts"),
])
def test_clear_errors(server, action, message):
    server.fail = [action]
    with pytest.raises(ModelError, match=message):
        rerank.apply(None, settings(backend="http", url=server.url, top_n=3), Q, FUSED, rows_of, {})
    assert len(server.requests) == 1  # a 4xx or a bad answer is not retried


def test_cli_shows_a_server_error_as_one_line(server, sample_store):
    server.fail = [400]
    r = runner.invoke(app, ["query", QUESTIONS[0], "--store", str(sample_store.path), "--set", "postprocess.rerank.backend=http",
                            "--set", f"postprocess.rerank.url={server.url}"])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: rerank server") and "HTTP 400" in lines[0], r.stderr


# ---- the store's dense model ----------------------------------------------------------------
def test_dense_backend_rescores_with_the_stores_model(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    base = load_contract(None, ["postprocess.dedup.enabled=false"], search=False)
    on = load_contract(None, ["postprocess.dedup.enabled=false", "postprocess.rerank.backend=dense",
                              "postprocess.rerank.model=dense", "postprocess.rerank.top_n=20"], search=False)
    changed = 0
    for q in QUESTIONS:
        plain = retrieve(sample_store, base, q, embedder=embedder, top_k=20)
        a = retrieve(sample_store, on, q, embedder=embedder, top_k=20)
        assert all(h.rerank_score is None for h in plain.hits)
        # the same 20 chunks, now ordered by their cosine under the store's model
        assert {h.chunk_id for h in a.hits} == {h.chunk_id for h in plain.hits}
        assert [h.rerank_score for h in a.hits] == pytest.approx([h.dense_score for h in a.hits], abs=1e-4)
        cos = [h.dense_score for h in a.hits]
        assert cos == sorted(cos, reverse=True)
        assert a.trace["rerank"]["backend"] == "dense" and "rerank_ms" in a.trace["timings_ms"]
        changed += [h.chunk_id for h in a.hits] != [h.chunk_id for h in plain.hits]
    assert changed  # the fused order is not the dense order: the test could fail


def test_dense_backend_unknown_model(sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    c = load_contract(None, ["postprocess.rerank.backend=dense", "postprocess.rerank.model=dense:nope"], search=False)
    with pytest.raises(ContractError, match=r"^postprocess\.rerank\.model: .*no embedding model 'dense:nope'"):
        retrieve(sample_store, c, QUESTIONS[0], embedder=embedder)


# ---- a tiny cross-encoder built here --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A 1-layer BERT with a 32-wide hidden state and one label, random but seeded weights, and the
    bundled MiniLM's tokenizer: a real CrossEncoder folder (a test fixture, not a reranker), built by
    the same function the rerank benchmark uses."""
    from bench.run import tiny_cross_encoder as build

    return build(tmp_path_factory.mktemp("tiny-ce"))


def test_cross_encoder_orders_by_its_predictions(sample_store, embedder, tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    from kbtool.document import embed_text
    from kbtool.query.pipeline import retrieve

    ce = CrossEncoder(str(tiny_cross_encoder), local_files_only=True)
    base = load_contract(None, ["postprocess.dedup.enabled=false"], search=False)
    on = load_contract(None, ["postprocess.dedup.enabled=false", "postprocess.rerank.backend=cross-encoder",
                              f"postprocess.rerank.model={tiny_cross_encoder}", "postprocess.rerank.top_n=20"],
                       search=False)
    changed = 0
    for q in QUESTIONS:
        fused = [h.chunk_id for h in retrieve(sample_store, base, q, embedder=embedder, top_k=20).hits]
        a = retrieve(sample_store, on, q, embedder=embedder, top_k=20)
        rows = sample_store.chunks_by_id(fused)
        predicted = ce.predict([(a.processed.text, embed_text(rows[c]["prefix"], rows[c]["text"])) for c in fused])
        expected = [fused[i] for i in sorted(range(len(fused)), key=lambda i: (-float(predicted[i]), i))]
        assert [h.chunk_id for h in a.hits] == expected
        assert [h.rerank_score for h in a.hits] == pytest.approx(sorted(map(float, predicted), reverse=True), abs=1e-5)
        changed += expected != fused
    assert changed


def test_cross_encoder_missing_folder(tmp_path, sample_store, embedder):
    from kbtool.query.pipeline import retrieve

    c = load_contract(None, ["postprocess.rerank.backend=cross-encoder", f"postprocess.rerank.model={tmp_path / 'nope'}"],
                      search=False)
    with pytest.raises(ModelError, match=r"postprocess\.rerank\.model: .*nope is not a local model folder"):
        retrieve(sample_store, c, QUESTIONS[0], embedder=embedder)


# ---- eval and calibrate run through it ------------------------------------------------------
def _eval(store, *args):
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", str(store.path), "--json", "-q", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_eval_runs_through_the_rerank(tmp_path, sample_store):
    # Reranking every candidate by the store's own cosine gives exactly the dense mode's ranking.
    contract = write(tmp_path / "rerank.yaml", yaml.safe_dump({"contract_version": 1, "postprocess": {
        "rerank": {"backend": "dense", "model": "dense", "top_n": 1000, "weight": 1.0}}}))
    plain = _eval(sample_store, "--modes", "dense,contract")
    on = _eval(sample_store, "--modes", "contract", "--contract", str(contract))
    name = next(iter(on["metrics"]))
    ranks = lambda run, mode: [q["modes"][mode].get("first_relevant_rank") for q in run["per_question"]]  # noqa: E731
    assert ranks(on, name) == ranks(plain, "dense")
    assert ranks(on, name) != ranks(plain, "contract")
    assert on["metrics"][name]["ndcg@10"] == plain["metrics"]["dense"]["ndcg@10"]


def test_calibrate_runs_through_the_rerank_and_scores_each_pair_once(tmp_path, sample_store, server):
    lines = SAMPLE_SET.read_text(encoding="utf-8").splitlines()[:24]
    qs = write(tmp_path / "q.jsonl", "\n".join(lines) + "\n")
    contract = write(tmp_path / "k.yaml", yaml.safe_dump({"contract_version": 1, "postprocess": {
        "rerank": {"backend": "http", "url": server.url, "top_n": 10, "weight": 0.5}}}))
    r = runner.invoke(app, ["calibrate", str(qs), "--store", str(sample_store.path), "--contract", str(contract),
                            "--folds", "2", "--json", "-q", "--negatives", "none"])  # leave-out negatives ask again
    assert r.exit_code == 0, r.output
    pairs = [(req["body"]["query"], t) for req in server.requests for t in req["body"]["texts"]]
    assert len(set(pairs)) >= 24 * 10  # every question's top 10, at least
    # The search answers each question under dozens of fusion settings and scores each pair once;
    # the verification (`evaluate` with the written contract, gathering afresh) once more.
    assert max(Counter(pairs).values()) <= 2


# ---- the contract ---------------------------------------------------------------------------
def test_default_is_off_and_init_writes_it(tmp_path):
    c = default_contract()
    assert c.postprocess.rerank.backend == "none" and c.postprocess.rerank.top_n == 20
    text = dump_yaml(c)
    assert "  rerank:\n" in text and "    backend: none\n" in text and "api_key_env: KBTOOL_RERANK_API_KEY" in text
    r = runner.invoke(app, ["contract", "init", str(tmp_path / "k.yaml")])
    assert r.exit_code == 0 and "rerank:" in (tmp_path / "k.yaml").read_text()


@pytest.mark.parametrize("comments", [False, True])
def test_round_trip(tmp_path, comments):
    c = load_contract(None, ["postprocess.rerank.backend=http", "postprocess.rerank.url=https://rr.example/v1/rerank",
                             "postprocess.rerank.api=cohere", "postprocess.rerank.weight=0.3",
                             "postprocess.rerank.model=rerank-english-v3.0"], search=False)
    again = load_contract(write(tmp_path / "c.yaml", dump_yaml(c, comments=comments)))
    assert again == c and again.postprocess.rerank.api == "cohere"
    assert rerank.endpoint(again.postprocess.rerank) == "https://rr.example/v1/rerank"


@pytest.mark.parametrize("rerank_, where", [
    ({"backend": "cross-encoder"}, "postprocess.rerank.model: required for backend cross-encoder"),
    ({"backend": "http"}, "postprocess.rerank.url: required for backend http"),
    ({"backend": "http", "url": "localhost:8080"}, "postprocess.rerank.url: 'localhost:8080' is not an http"),
    ({"backend": "dense", "model": "minilm"}, "postprocess.rerank.model: 'minilm': for backend dense"),
    ({"backend": "colbert"}, "postprocess.rerank.backend: must be 'none', 'cross-encoder', 'http' or 'dense'"),
    ({"api": "openai"}, "postprocess.rerank.api: must be 'tei' or 'cohere'"),
    ({"top_n": 0}, "postprocess.rerank.top_n: must be greater than 0"),
    ({"weight": 1.5}, "postprocess.rerank.weight: must be less than or equal to 1"),
    ({"timeout_s": 0}, "postprocess.rerank.timeout_s: must be greater than 0"),
    ({"retries": -1}, "postprocess.rerank.retries: must be greater than or equal to 0"),
    ({"api_key_env": "MY KEY"}, "postprocess.rerank.api_key_env: 'MY KEY' is not an environment variable name"),
    ({"modle": "x"}, "postprocess.rerank.modle: unknown key"),
])
def test_validation_names_the_field(rerank_, where):
    with pytest.raises(ContractError) as info:
        validate_contract({"contract_version": 1, "postprocess": {"rerank": rerank_}})
    assert str(info.value) == f"contract: {where}" or str(info.value).startswith(f"contract: {where}")


def test_every_field_is_described():
    from kbtool.contract import Rerank

    assert all(f.description for f in Rerank.model_fields.values())
    assert isinstance(Contract(contract_version=1).postprocess.rerank, Rerank)


def test_backends_are_chosen_by_name_from_one_registry(monkeypatch):
    class ByLength:
        def score(self, question, texts, ids=None):
            return [float(len(t)) for t in texts]

    assert sorted(rerank.BACKENDS) == ["cross-encoder", "dense", "http"]
    monkeypatch.setitem(rerank.BACKENDS, "dense", rerank.Backend(lambda store, s: ByLength(), lambda s: "by-length"))
    rows = {"a": {"text": "x"}, "b": {"text": "xxx"}, "c": {"text": "xx"}}
    out, info = rerank.apply(None, settings(backend="dense", weight=1.0, top_n=3), "q",
                             [("a", 0.9), ("b", 0.5), ("c", 0.1)], lambda ids: rows, {})
    assert [c for c, _ in out] == ["b", "c", "a"] and info["model"] == "by-length"
    with pytest.raises(ContractError, match="'none' has no reranker"):
        rerank.load(None, settings(backend="none"))
