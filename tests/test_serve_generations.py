"""A live server answers from one generation at a time (issue 36).

The real server (`kbtool serve --watch`, its own process) and real HTTP clients: while two threads
keep asking, a file is edited (the watch re-ingests it in a child process: catalog first, then the
vectors, then BM25, then the manifest) and then reverted (re-ingested again). Every answer asked
meanwhile must be the answer of the old generation or of the new one — decision, confidence, every
hit with its scores and signals — never a mix (a catalog ahead of the indexes drops the edited
page's old chunks; a BM25 reloaded before the vectors scores the new statistics with the old
vectors; Chroma re-opened mid-write holds half the vectors).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from .conftest import write
from .test_serve_live import _env, _until

pytestmark = pytest.mark.slow  # a real server with the real model, two real ingests

OLD_B = "# Beta\n\nThe beta service sends a weekly digest email every Monday.\n"
NEW_B = ("# Beta\n\nThe beta service faxes a quarterly audit report every Friday; the weekly digest email "
         "moved to the gamma service.\n")
QUESTIONS = [
    {"question": "weekly digest email Monday", "top_k": 3},
    {"question": "Which service faxes the quarterly audit report?", "top_k": 3, "mode": "hybrid",
     "filters": ["filetype=md"]},  # a filter: the dense search is restricted to the allowed chunks
]


def _signature(answer: dict) -> str:
    """What must be one generation's: the decision and every hit with its scores and signals."""
    r = lambda v: round(v, 5) if isinstance(v, float) else v  # noqa: E731
    hits = [(h["doc_id"], h["chunk_id"], h["text"], r(h["score"]), r(h["dense_score"]), h["dense_rank"],
             r(h["bm25_score"]), r(h["bm25_coverage"]), h["bm25_rank"]) for h in answer["hits"]]
    signals = {k: r(v) for k, v in sorted(answer["signals"].items())}
    return json.dumps([answer["decision"], r(answer["confidence"]), hits, signals], sort_keys=True, default=str)


def test_every_answer_during_an_edit_and_a_revert_is_one_generations(tmp_path, embedder):
    import httpx

    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    docs = tmp_path / "docs"
    write(docs / "a.md", "# Alpha\n\nThe alpha service stores invoices for seven years.\n")
    write(docs / "b.md", OLD_B)
    write(docs / "c.md", "# Gamma\n\nGamma rotates the signing keys every ninety days.\n")
    write(docs / "d.md", "# Delta\n\nDelta archives audit logs and mails a monthly summary.\n")
    kb = Store.open(tmp_path / "kb", create=True)
    ingest(kb, [docs], embedder=embedder)
    kb.close()
    err = open(tmp_path / "serve.err", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "kbtool", "serve", "--store", str(tmp_path / "kb"), "--port", "0",
                             "--watch", "--log-level", "warning"], stdout=subprocess.PIPE, stderr=err, cwd=tmp_path,
                            env=_env())
    try:
        url = _until(lambda: (lambda t: t.split("kbtool serve: ")[1].split()[0] if "kbtool serve: http" in t else None)(
            (tmp_path / "serve.err").read_text()), timeout=120)
        assert url, (tmp_path / "serve.err").read_text()
        client = httpx.Client(base_url=url, timeout=60)

        def ask(c, i):
            r = c.post("/v1/retrieve", json=QUESTIONS[i])
            assert r.status_code == 200, r.text[:300]
            return r.json()

        def generation(c):
            return c.get("/healthz").json()["index"]

        old = [_signature(ask(client, i)) for i in range(len(QUESTIONS))]
        g0 = generation(client)["generation"]
        answers, done, errors = [], threading.Event(), []

        def loop(i):
            with httpx.Client(base_url=url, timeout=60) as c:
                while not done.is_set():
                    try:
                        a = ask(c, i)
                        answers.append((i, _signature(a), a["index"] if "index" in a else None))
                    except Exception as exc:  # noqa: BLE001 - any failed request fails the test
                        errors.append(repr(exc))

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(QUESTIONS))]
        for t in threads:
            t.start()
        write(docs / "b.md", NEW_B)
        assert _until(lambda: (g := generation(client))["generation"] > g0 and g["indexes_current"], timeout=180,
                      every=0.2), (tmp_path / "serve.err").read_text()[-2000:]
        g1 = generation(client)["generation"]
        time.sleep(1.0)
        write(docs / "b.md", OLD_B)
        assert _until(lambda: (g := generation(client))["generation"] > g1 and g["indexes_current"], timeout=180,
                      every=0.2), (tmp_path / "serve.err").read_text()[-2000:]
        time.sleep(0.5)
        done.set()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        # the new generation's answers, asked of a fresh server process would be the same: ask the
        # old store's twin — the edit applied once more, then read while nothing writes
        write(docs / "b.md", NEW_B)
        g2 = generation(client)["generation"]
        assert _until(lambda: (g := generation(client))["generation"] > g2 and g["indexes_current"], timeout=180,
                      every=0.2)
        time.sleep(0.5)
        new = [_signature(ask(client, i)) for i in range(len(QUESTIONS))]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        err.close()
    assert new != old, "the edit changed no answer: the test would prove nothing"
    assert len(answers) >= 200, len(answers)
    mixed = [(i, s) for i, s, _ in answers if s not in (old[i], new[i])]
    assert not mixed, f"{len(mixed)} of {len(answers)} answers were of neither generation, e.g. {mixed[0]}"
    behind = [a for a in answers if a[2] and (a[2]["writer_active"] or not a[2]["indexes_current"])]
    print(f"{len(answers)} answers, {len(behind)} asked while a generation was being written")
    assert len(behind) >= 20, "too few answers fell while the ingests wrote: the test would prove little"
    both = {(i, s == new[i]) for i, s, _ in answers}
    assert (0, True) in both or (1, True) in both, "no answer came from the new generation"
    assert "Traceback" not in (tmp_path / "serve.err").read_text()
