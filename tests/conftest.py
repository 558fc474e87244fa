"""Fixtures. Everything a test writes goes under tmp_path; the real bundled model, real Chroma
and real files are used throughout (small inputs keep it fast).

Two tiers. A test is ``slow`` when it loads a real embedding model: it is marked here, by
fixture (``MODEL_FIXTURES`` anywhere in its fixture closure, so a module fixture built on
``embedder`` counts too), or by hand (``@pytest.mark.slow``) when it loads one itself
(``load_embedder()``, ``kbtool ingest`` in-process or in a subprocess). ``make test-fast`` runs
``-m "not slow"``; ``make test`` runs everything. A test NOT marked slow that loads a model
in-process fails (``pytest_sessionstart``), in either tier, so the marking cannot go stale."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# The caller's terminal is not the tests': pytest-xdist's workers get COLUMNS=80 and LINES=24, which
# kbtool's consoles honour (tables cut to 80 columns). They are made when kbtool.cli is imported,
# at collection, before any fixture runs: cleared here, at the first import; a test that wants a
# width sets it itself (as the --help test does for its subprocesses).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_corpus"


def _set_env(tmp_path_factory, mp) -> None:
    home = tmp_path_factory.getbasetemp() / "home"
    home.mkdir(exist_ok=True)
    mp.setenv("HOME", str(home))
    mp.setenv("KBTOOL_CACHE_DIR", str(home / "cache"))  # the ONNX export lands here, once per session
    mp.setenv("KBTOOL_STORE", str(home / "never-used-store"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("DO_NOT_TRACK", "1")
    # ranx (the metrics oracle, dev only) compiles ~40 s of numba on a fresh venv for a few dozen
    # questions; run as plain Python it computes the same in milliseconds. kbtool uses no numba.
    mp.setenv("NUMBA_DISABLE_JIT", "1")
    mp.delenv("KBTOOL_RUNTIME", raising=False)
    mp.delenv("KBTOOL_EMBED_API_KEY", raising=False)
    mp.delenv("OPENAI_API_KEY", raising=False)
    mp.delenv("COLUMNS", raising=False)
    mp.delenv("LINES", raising=False)


# Fixtures that load a real model (the bundled MiniLM, or use-m): every test using one, directly
# or through another fixture, is marked slow. Fixtures built on these need no entry, nor does a
# fixture that calls load_embedder() itself.
MODEL_FIXTURES = frozenset({"embedder", "three_retrievers"})
REFUSED_LOADS = pytest.StashKey[list]()


def _loads_a_model(fixturedef) -> bool:
    """One of MODEL_FIXTURES, or a fixture (a module's own) whose body calls load_embedder()."""
    import inspect

    if fixturedef.argname in MODEL_FIXTURES:
        return True
    try:
        return "load_embedder(" in inspect.getsource(fixturedef.func)
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = [d for ds in (info.name2fixturedefs.values() if info else ()) for d in ds]
        if any(_loads_a_model(d) for d in defs):
            item.add_marker(pytest.mark.slow)


_running: list = []  # the test being set up, run or torn down (fixtures of any scope load for it)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.remove(item)


def pytest_sessionstart(session):
    """Every model load of the session goes through this guard (kbtool.embed's one loader): for a
    test not marked slow it fails, also from a module or session fixture set up for that test.
    An endpoint model (``openai:...``) is no load and passes. The refusal is recorded as well as
    raised, so code that catches the error still fails the test (``_no_model_unless_slow``)."""
    import kbtool.embed as embed

    real = embed._load

    def guarded(spec, runtime):
        item = _running[-1] if _running else None
        if spec.backend != "http" and item is not None and not item.get_closest_marker("slow"):
            item.stash.setdefault(REFUSED_LOADS, []).append(spec.model)
            raise AssertionError(f"{item.nodeid} loads the model {spec.model!r} but is not marked slow: "
                                 "use a fixture in conftest.MODEL_FIXTURES, or mark it @pytest.mark.slow")
        return real(spec, runtime)

    embed._load = guarded


@pytest.fixture(autouse=True)
def _no_model_unless_slow(request):
    yield
    refused = request.node.stash.get(REFUSED_LOADS, [])
    if refused:
        pytest.fail(f"loaded {refused} without the slow marker (see conftest.pytest_sessionstart)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _isolated_session_env(tmp_path_factory):
    """Before any session fixture loads the model: nothing is written outside the test folders."""
    mp = pytest.MonkeyPatch()
    _set_env(tmp_path_factory, mp)
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    _set_env(tmp_path_factory, monkeypatch)


@pytest.fixture(scope="session")
def embedder():
    from kbtool.embed import load_embedder

    return load_embedder()


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory, embedder):
    """The bundled sample corpus, ingested once into a real store (read-only for tests)."""
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("sample")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE, corpus)
    store = Store.open(base / "kb", create=True)
    report = ingest(store, [corpus], embedder=embedder)
    assert not report.failed, report.failed
    return store


@pytest.fixture(scope="session")
def retriever(sample_store, embedder):
    from kbtool.query.retriever import Retriever

    return Retriever(sample_store, embedder)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def public_and_restricted_store(base: Path, public: dict, restricted: dict, meta: dict, embedder,
                                folder: str = "secret"):
    """A store of ``public`` documents and, from ``folder``, ``restricted`` ones ingested with
    ``meta`` (e.g. access tags): {name: text} each."""
    from kbtool.ingestion.pipeline import IngestOptions, ingest
    from kbtool.store import Store

    for name, text in public.items():
        write(base / "public" / name, text)
    for name, text in restricted.items():
        write(base / folder / name, text)
    store = Store.open(base / "kb", create=True)
    assert not ingest(store, [base / "public"], embedder=embedder).failed
    assert not ingest(store, [base / folder], IngestOptions(metadata=meta), embedder=embedder).failed
    return store


class FakeEmbedder:
    """A deterministic, instant embedder for logic tests (fusion, confidence, decisions,
    calibrate's search): each word and word bigram is hashed into one of 64 dimensions, and the
    vector is L2-normalised. Texts sharing words get a positive cosine; no model is loaded.

    Its model id uses the endpoint scheme (``openai:``) because a store accepts a model it can
    check without loading: a local id must be a real model folder. Nothing is ever sent anywhere:
    tests pass this embedder to ``ingest`` and ``gather`` themselves."""

    dim = 64
    max_tokens = 256
    runtime = "fake"

    def __init__(self):
        from kbtool.embed import EmbeddingSpec

        self.spec = EmbeddingSpec(model="openai:kbtool-test-fake-hash64", max_tokens=self.max_tokens)
        self.model_id = self.spec.model

    @staticmethod
    def _words(text: str) -> list[str]:
        import re

        # CJK characters count one by one, like the BM25 analyzer's unigrams
        return re.findall(r"[\u3400-\u9fff]|[^\W_]+(?:-[^\W_]+)*", text.lower())

    def count_tokens(self, text: str) -> int:
        return len(self._words(text))

    def _vector(self, text: str):
        import zlib

        import numpy as np

        v = np.zeros(self.dim, dtype=np.float32)
        words = self._words(text)
        for gram in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
            h = zlib.crc32(gram.encode())
            v[h % self.dim] += 1.0 if (h >> 8) % 2 else -1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def embed(self, texts, progress=None):
        import numpy as np

        out = np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)
        if progress:
            progress(len(texts))
        return out

    def embed_queries(self, texts):
        return self.embed(texts)

    def for_bulk(self, total: int):
        return self


@pytest.fixture(scope="session")
def fake_embedder():
    """A deterministic fake embedder (see ``FakeEmbedder``): logic tests run in milliseconds."""
    return FakeEmbedder()


# English questions every retriever answers, and Chinese paraphrases that share few words with
# their document: the multilingual model (dense:use-m) finds them, BM25 and the fake embedder
# often do not.
THREE_EN = ["the agent stops syncing after a network timeout", "a refund is available within seven days",
            "storage quota is full and uploads fail", "the proxy replaces the TLS certificate",
            "two people edited the same file and a conflict copy was kept", "the license key was rejected"]
THREE_ZH = [("同步冲突", "当两台设备同时修改同一个文件时，系统会保留两个版本，不会丢失任何修改。", "两台电脑改了同一份文档会怎样？"),
            ("退款政策", "购买后三十天内可以申请全额退款，请联系客服。", "多久之内可以退钱？"),
            ("存储空间", "账户的存储容量用完以后，新的照片和视频就传不上去了。", "网盘满了怎么办？"),
            ("密码重置", "忘记登录口令时，点击登录页面下方的链接，按邮件提示设置新口令。", "我不记得密码了"),
            ("离线使用", "没有网络的时候，已经下载到本机的资料仍然可以打开和编辑。", "断网以后还能看文件吗？"),
            ("共享文件夹", "邀请同事加入后，大家都能查看和修改这个目录里的内容。", "怎样让团队成员一起编辑？"),
            ("发票", "每个月的第一天，账单会自动发送到您注册时填写的电子邮箱。", "收据什么时候寄给我？"),
            ("安装", "运行安装程序，然后选择一个文件夹来存放您的资料。", "怎么把软件装到电脑上？"),
            ("删除恢复", "误删的资料会在回收站保留三十天，期间可以随时还原。", "不小心删掉的东西能找回来吗？"),
            ("手机应用", "在应用商店搜索我们的名字，下载后用同一个账号登录即可。", "能在智能手机上用吗？"),
            ("速度慢", "上传很慢时，请暂停其他下载任务，或者换一个更稳定的无线网络。", "传东西特别卡是什么原因？"),
            ("两步验证", "开启后，每次在新设备登录都需要输入短信里的六位数字。", "如何让账号更安全？")]


@pytest.fixture(scope="session")
def three_retrievers(tmp_path_factory, fake_embedder):
    """A small store with three retrievers: dense (the fake embedder), bm25 and dense:use-m (the
    bundled multilingual model, added as `kbtool index --add-model use-m` adds it), and its
    questions: (store, QuestionSet, path of the questions file). Read-only for tests."""
    import json

    from kbtool.evaluation.questions import load_questions
    from kbtool.index import index
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    base = tmp_path_factory.mktemp("three")
    lines = []
    for i, topic in enumerate(THREE_EN):
        write(base / "docs" / f"en{i}.md", f"# Topic {i}\n\nHere {topic}. Restart the agent and try again.\n")
        lines.append({"id": f"en{i}", "question": f"why does it say {topic.split(' ', 2)[2]}?", "relevant": [f"en{i}.md"]})
    for i, (title, body, question) in enumerate(THREE_ZH):
        write(base / "docs" / f"zh{i}.md", f"# {title}\n\n{body}\n")
        lines.append({"id": f"zh{i}", "question": question, "relevant": [f"zh{i}.md"]})
    for i, q in enumerate(["How do I pay with PayPal?", "Is there a dark mode?", "支持苹果手表吗？"]):
        lines.append({"id": f"u{i}", "question": q, "relevant": []})
    path = write(base / "q.jsonl", "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in lines))
    store = Store.open(base / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [base / "docs"], embedder=fake_embedder).failed
    assert store.add_model("use-m") == "dense:use-m"
    index(store, embedder=fake_embedder)
    return store, load_questions(path), path


def stand_in_http(status: int, body: bytes, ctype: str, seen: list | None = None):
    """A local HTTP server answering every GET and POST with ``status``, ``body`` and ``ctype``
    (``seen`` collects each request's Authorization header): (the server, its URL). Shut it down."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if seen is not None:
                seen.append(self.headers.get("Authorization"))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def norm(text: str) -> str:
    """Text as compared with a block's: backticks out, whitespace collapsed."""
    return " ".join(text.replace("`", "").split())


def block_at(doc, line: int, phrase: str):
    """The block of a parsed document holding ``phrase`` whose cited lines cover ``line``."""
    found = [b for b in doc.blocks if norm(phrase) in norm(b.text)]
    assert found, f"{phrase!r} is in no block of {doc.doc_id}"
    cited = [b for b in found if b.lines and b.lines[0] <= line <= b.lines[1]]
    assert cited, f"{phrase!r} is cited at {[b.lines for b in found]}, not at line {line}"
    return cited[0]
