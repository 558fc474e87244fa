"""Output through real pipes and files (not a terminal): complete tables, plain progress lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, write

pytestmark = pytest.mark.slow  # every test runs kbtool in a subprocess, most on the model

KBTOOL = [sys.executable, "-m", "kbtool"]


def _env():
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    return env


def test_piped_query_and_eval_tables_are_complete(sample_store, tmp_path):
    # `kbtool query ... | cat`: stdout is a pipe.
    q = subprocess.run(KBTOOL + ["query", "refund window in the EU", "--store", str(sample_store.path), "--top-k", "5"],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert q.returncode == 0, q.stderr
    assert "policies/refund-policy.docx" in q.stdout  # a path is never cut mid-word
    assert max(len(line) for line in q.stdout.splitlines()) > 80  # not squeezed into 80 columns

    # `kbtool eval ... > out.txt`: stdout is a file.
    out = tmp_path / "out.txt"
    with out.open("w") as fh:
        e = subprocess.run(KBTOOL + ["eval", str(ROOT / "eval_sets" / "sample.jsonl"), "--store", str(sample_store.path),
                                     "--modes", "bm25,dense,hybrid,contract"],
                           stdout=fh, stderr=subprocess.PIPE, text=True, env=_env(), timeout=300)
    assert e.returncode == 0, e.stderr
    text = out.read_text()
    assert "…" not in text  # no truncated number or name anywhere
    for tag in ("exact-id", "paraphrase", "unanswerable"):
        assert tag in text
    header = next(line for line in text.splitlines() if "contract" in line and "hybrid" in line)
    assert "contract" in header  # all four modes side by side in one table


def test_ingest_with_stderr_to_a_file_writes_progress_lines(tmp_path):
    for i in range(3):
        write(tmp_path / "d" / f"n{i}.md", f"# Note {i}\n\nThe heron number {i} stands in the reeds.\n")
    log = tmp_path / "ingest.log"
    with log.open("w") as fh:
        r = subprocess.run(KBTOOL + ["ingest", str(tmp_path / "d"), "--store", str(tmp_path / "kb")],
                           stdout=subprocess.PIPE, stderr=fh, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, log.read_text()
    lines = log.read_text().splitlines()
    for stage in ("parsing: 3/3 (100%)", "chunking: 3/3 (100%)", "embedding: 3/3 (100%)"):
        assert any(line.startswith(stage) for line in lines), lines
    assert all("\r" not in line and "\x1b" not in line for line in lines)  # plain lines, no bars
    # -q silences them.
    write(tmp_path / "d" / "n9.md", "# Note 9\n\nAnother heron.\n")
    with log.open("w") as fh:
        r = subprocess.run(KBTOOL + ["ingest", str(tmp_path / "d"), "--store", str(tmp_path / "kb"), "-q"],
                           stdout=subprocess.PIPE, stderr=fh, text=True, env=_env(), timeout=300)
    assert r.returncode == 0 and log.read_text() == ""


def test_progress_lines_are_throttled():
    import kbtool.cli._common as common

    printed = []

    class Sink:
        def print(self, line, **kw):
            printed.append(line)

    real = common.err
    common.err = Sink()
    try:
        update = common._progress_lines()
        for _ in range(1000):
            update("embedding", 1, 1000)
    finally:
        common.err = real
    assert printed[-1].startswith("embedding: 1000/1000 (100%)")
    assert len(printed) <= 2  # a fast stage: at most one line on the way, one at the end


def _with_reader_gone(args: list[str]) -> tuple[int, str]:
    """Run kbtool with its stdout reader gone before it writes (`kbtool ... | head -0`)."""
    p = subprocess.Popen(KBTOOL + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    p.stdout.close()
    err = p.stderr.read().decode()
    return p.wait(timeout=300), err


def test_a_closed_pipe_keeps_the_commands_own_exit_code(sample_store):
    """`kbtool query ... | head -1` exits 0 with nothing on stderr (was 1: BrokenPipeError), and
    under `set -o pipefail` a failing gate still says 3, not the pipe's error."""
    rc, err = _with_reader_gone(["query", "refund window in the EU", "--store", str(sample_store.path)])
    assert (rc, err) == (0, "")
    rc, err = _with_reader_gone(["eval", str(ROOT / "eval_sets" / "sample.jsonl"), "--store", str(sample_store.path),
                                 "--modes", "bm25", "--fail-under", "bm25:ndcg@10>=0.99", "-q"])
    assert rc == 3, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_eval_tables_lead_with_the_headline_metrics(sample_store):
    """The default table is the headline (hit_rate@5, mrr@10, ndcg@10) per mode, not 24 rows;
    --all-metrics or --k/--metrics show the rest; the JSON always has everything."""
    args = KBTOOL + ["eval", str(ROOT / "eval_sets" / "sample.jsonl"), "--store", str(sample_store.path), "-q",
                     "--modes", "bm25,contract"]
    short = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=300).stdout
    main = short.split("Retrieval quality by mode")[1].split("Fused mode")[0]
    assert "ndcg@10" in main and "hit_rate@5" in main and "hit_rate@1" not in main and "ndcg@3" not in main
    full = subprocess.run(args + ["--all-metrics"], capture_output=True, text=True, env=_env(), timeout=300).stdout
    main = full.split("Retrieval quality by mode")[1].split("Fused mode")[0]
    assert "hit_rate@1" in main and "ndcg@3" in main
    k3 = subprocess.run(args + ["--k", "3"], capture_output=True, text=True, env=_env(), timeout=300).stdout
    assert "ndcg@3" in k3.split("Retrieval quality by mode")[1].split("Fused mode")[0]


def test_report_html_counts_agree_with_the_terminal(sample_store, tmp_path):
    """report.html's per-tag n is the answerable count the terminal and JSON give (it counted every
    question), and a tag of unanswerable questions shows what each mode refused (was blank)."""
    import json

    args = KBTOOL + ["eval", str(ROOT / "eval_sets" / "sample.jsonl"), "--store", str(sample_store.path), "-q",
                     "--modes", "bm25,contract", "--out", str(tmp_path / "ev"), "--json"]
    data = json.loads(subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=300).stdout)
    html = (tmp_path / "ev" / "report.html").read_text()
    for tag in ("zh", "exact-id"):
        assert f"<tr><td>{tag}</td><td>{data['by_tag'][tag]['answerable']}</td>" in html, tag
    r = data["by_tag"]["unanswerable"]["refusal"]["contract"]
    assert f"{r['correctly_refused']}/{r['unanswerable']} refused" in html


def test_query_ends_its_process_at_once_without_losing_output(sample_store, tmp_path):
    """`query` skips Python's teardown at exit (os._exit): every answer of a batch still reaches a
    pipe, every trace record its file, and errors keep their exit code."""
    questions = [json.loads(x)["question"] for x in (ROOT / "eval_sets" / "sample.jsonl").read_text("utf-8").splitlines()
                 if x.strip()][:40]
    trace = tmp_path / "trace.jsonl"
    proc = subprocess.run(KBTOOL + ["query", "--batch", "-", "--store", str(sample_store.path), "--trace", str(trace)],
                          input="\n".join(questions) + "\n", capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(answers) == len(questions) and all("decision" in a for a in answers)
    assert len([json.loads(line) for line in trace.read_text().splitlines()]) == len(questions)
    bad = subprocess.run(KBTOOL + ["query", "x", "--store", str(tmp_path / "none")], capture_output=True, text=True,
                         env=_env(), timeout=300)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: no kbtool store")
