"""The CLI end to end with typer's CliRunner: exit codes, --json on stdout, errors on stderr."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbtool.cli import app

from .conftest import ROOT, write

runner = CliRunner()
COMMANDS = ["ingest", "chunk", "chunks", "index", "query", "status", "eval", "calibrate", "doctor", "serve"]


@pytest.fixture
def docs(tmp_path):
    write(tmp_path / "docs/guide.md", "# Guide\n\n## Ports\n\nThe server listens on port 8443 (setting net.port).\n")
    write(tmp_path / "docs/faq.md", "# FAQ\n\nReset a password from the account page.\n")
    # Okapi idf is zero for a term in half the documents or more: give BM25 a few more documents.
    write(tmp_path / "docs/billing.md", "# Billing\n\nInvoices are sent on the first day of the month.\n")
    write(tmp_path / "docs/teams.md", "# Teams\n\nAn owner can invite members to a team.\n")
    return tmp_path / "docs"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.slow
def test_ingest_query_status_json(docs, tmp_path):
    kb = tmp_path / "kb"
    r = run("ingest", docs, "--store", kb, "--json", "-q")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["counts"]["added"] == 4 and report["index"]["embedded"] >= 4

    r = run("query", "net.port", "--store", kb, "--json", "--mode", "bm25")
    assert r.exit_code == 0
    hits = json.loads(r.stdout)["hits"]
    assert hits[0]["doc_id"] == "guide.md" and hits[0]["section_path"] == "Guide > Ports"

    r = run("--store", kb, "status", "--json")  # --store also works before the command
    assert r.exit_code == 0 and json.loads(r.stdout)["documents"] == 4

    r = run("query", "password reset", "--store", kb)
    assert r.exit_code == 0 and "faq.md" in r.stdout


@pytest.mark.slow
def test_chunk_then_index(docs, tmp_path):
    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    r = run("chunk", "--size", "32", "--store", kb, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["indexes_current"] is False
    r = run("query", "port", "--store", kb)
    assert r.exit_code == 1 and "kbtool index" in r.stderr
    r = run("index", "--store", kb, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["chunks"] >= 2


@pytest.mark.slow
def test_errors_are_one_line_with_exit_codes(docs, tmp_path):
    r = run("query", "x", "--store", tmp_path / "none")
    assert r.exit_code == 1 and "kbtool ingest" in r.stderr and "Traceback" not in r.output
    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    assert run("query", "x", "--store", kb, "--mode", "sparse").exit_code == 2
    assert run("query", "x", "--store", kb, "--filter", "novalue").exit_code == 2
    r = run("query", "x", "--store", kb, "--filter", "colour=red")
    assert r.exit_code == 1 and "known keys" in r.stderr
    r = run("query", "x", "--store", kb, "--model", "some/other-model")
    assert r.exit_code == 1 and "--rebuild" in r.stderr
    assert run("ingest", tmp_path / "missing", "--store", kb).exit_code == 2
    assert run("ingest", docs, "--store", kb, "--meta", "page=1").exit_code == 2
    assert run("ingest", docs, "--store", kb, "--encoding", "klingon").exit_code == 2
    assert run("ingest", docs, "--store", kb, "--format", "xml").exit_code == 2
    assert run("ingest", docs, "--store", kb, "--bogus").exit_code == 2


@pytest.mark.slow
def test_strict_ingest_exits_1_on_a_failed_file(docs, tmp_path):
    (docs / "bad.pdf").write_bytes(b"%PDF garbage")
    r = run("ingest", docs, "--store", tmp_path / "kb", "--strict")
    assert r.exit_code == 1 and "bad.pdf" in r.stderr


@pytest.mark.slow
def test_beir_folder_ingests_with_doc_ids(tmp_path):
    beir = tmp_path / "beir"
    records = [
        {"_id": "d1", "title": "boundary layer transition", "text": "transition of the laminar boundary layer on a flat plate"},
        {"_id": "d2", "title": "shock waves", "text": "oblique shock waves at hypersonic speed"},
        {"_id": "d3", "title": "", "text": "heat transfer in supersonic flow over a cone"},
        {"_id": "d4", "title": "", "text": ""},
    ]
    write(beir / "corpus.jsonl", "\n".join(json.dumps(r) for r in records) + "\n")
    kb = tmp_path / "kb"
    r = run("ingest", "--format", "beir", beir, "--store", kb, "--json", "-q")
    assert r.exit_code == 0, r.output  # an empty record is skipped (nothing to index), not a failure
    report = json.loads(r.stdout)
    assert sorted(report["added"]) == ["d1", "d2", "d3"] and not report["failed"]
    assert report["skipped"] == {"record has neither title nor text: nothing to index": ["d4"]}
    r = run("query", "hypersonic shock", "--store", kb, "--json")
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "d2"
    r = run("ingest", "--format", "beir", beir, "--store", kb, "--json", "-q")
    assert json.loads(r.stdout)["counts"]["unchanged"] == 3

    write(beir / "corpus.jsonl", '{"_id": "d1", "text": "ok"}\n{not json\n')
    r = run("ingest", "--format", "beir", beir, "--store", kb)
    assert r.exit_code == 1 and "corpus.jsonl:2" in r.stderr


@pytest.mark.slow
def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from kbtool.cli import app\n"
        f"for args in [['--help']] + [[c, '--help'] for c in {COMMANDS!r}]:\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "heavy = {'torch', 'chromadb', 'unstructured', 'sentence_transformers', 'numpy', 'bm25s', 'jieba',\n"
        "         'onnxruntime', 'tokenizers', 'transformers'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_command_has_a_page_in_the_docs():
    """Options are held to the docs by tests/test_docs.py; here, that each command is named there."""
    docs = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    for command in COMMANDS:
        assert f"kbtool {command}" in docs, command
    assert "kbtool contract init|show|validate" in docs


@pytest.mark.slow
def test_a_failed_file_fails_the_ingest_unless_allowed(tmp_path):
    """A CI recipe `kbtool ingest docs && kbtool eval ...` must never gate a store that missed
    files: any failed file exits 1 (after ingesting the rest); --allow-failures N accepts N; the
    terminal names the first ten, --json lists every one; an empty file is skipped, not failed."""
    docs = tmp_path / "docs"
    write(docs / "good.md", "# Good\n\nThe word marmaladefox lives here.\n")
    write(docs / "empty.md", "   \n")
    for i in range(12):
        (docs / f"bad{i:02d}.pdf").write_bytes(b"%PDF-1.4 garbage")
    kb = tmp_path / "kb"
    r = run("ingest", docs, "--store", kb, "-q")
    assert r.exit_code == 1, r.output
    assert "12 file(s) failed" in r.stderr and "--allow-failures 12" in r.stderr and "Traceback" not in r.output
    assert "bad09.pdf" in r.stderr and "bad10.pdf" not in r.stderr and "and 2 more" in r.stderr
    assert "empty.md" not in r.stderr  # quiet: skipped files are not listed
    r = run("query", "marmaladefox", "--store", kb, "-m", "bm25", "--json")
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "good.md"  # the rest was ingested
    r = run("ingest", docs, "--store", kb, "--json", "-q")
    assert r.exit_code == 1
    report = json.loads(r.stdout)
    assert len(report["failed"]) == 12 and report["skipped"] == {"empty file: nothing to index": ["empty.md"]}
    r = run("ingest", docs, "--store", kb, "-q", "--allow-failures", "12")
    assert r.exit_code == 0, r.output
    r = run("ingest", docs, "--store", kb, "-q", "--allow-failures", "11")
    assert r.exit_code == 1 and "(allowed: 11)" in r.stderr
    r = run("ingest", docs, "--store", kb, "-q", "--strict", "--allow-failures", "12")
    assert r.exit_code == 0  # the old opt-in still parses


@pytest.mark.slow
def test_the_same_folder_under_another_root_fails_loudly(tmp_path):
    """A store built from one checkout, ingested from another path while the first still exists:
    the ids already come from the first root, and the ingest stops before writing, by exit code (it
    used to exit 0 and let a stale store be gated), naming the ways out (tests/test_sources.py has
    the moved-folder cases)."""
    for root in ("a", "b"):
        write(tmp_path / root / "docs" / "x.md", "# X\n\nsame text\n")
    kb = tmp_path / "kb"
    assert run("ingest", tmp_path / "a" / "docs", "--store", kb, "-q").exit_code == 0
    r = run("ingest", tmp_path / "b" / "docs", "--store", kb, "-q")
    assert r.exit_code == 2 and "already come from" in r.stderr and "--root-moved" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["80", "200"])
def test_help_shows_defaults_plain_flags_and_fits_80_columns(columns):
    """--help: defaults and bracketed text are shown (Rich markup used to eat '[default: ./.kb]'),
    boolean flags take no value placeholder ('--context <bool>' suggested `--context true`, which
    fails), text wraps at 80 columns whatever the terminal, and examples are not cut."""
    env = {**__import__("os").environ, "COLUMNS": columns}
    for command in ("query", "ingest", "eval", "calibrate", "index", "status"):
        r = subprocess.run([sys.executable, "-m", "kbtool", command, "--help"], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, (command, max(lines, key=len))
        assert "[default: ./.kb; env" in r.stdout, command
        assert not [line for line in lines if re.search(r"--(json|quiet|context|rebuild)\b\s+<", line)], command
    r = subprocess.run([sys.executable, "-m", "kbtool", "query", "--help"], capture_output=True, text=True, env=env)
    assert "openai:http://HOST:PORT/v1#NAME" in r.stdout and "Number of results [default:" in r.stdout


def test_query_batch_answers_many_questions_in_one_process_as_single_queries_do(sample_store, tmp_path):
    """`kbtool query --batch FILE|-`: one JSON answer per line, in input order, ids kept, per-line
    filters applied; each answer is the one a single `query --json` gives (one pipeline)."""
    kb = str(sample_store.path)
    lines = ["What causes error TW-E5120 and how do I fix it?",
             json.dumps({"id": "r1", "question": "refund window", "filters": ["dir=policies/**"]}),
             "",
             json.dumps({"id": "z", "question": "出现同步冲突时，我的修改会丢失吗？", "tags": ["zh"]})]
    batch = write(tmp_path / "questions.txt", "\n".join(lines) + "\n")
    r = run("query", "--batch", batch, "--store", kb)
    assert r.exit_code == 0, r.output
    got = [json.loads(x) for x in r.stdout.splitlines()]
    assert [g.get("id") for g in got] == [None, "r1", "z"]
    assert got[1]["filters"] == ["dir=policies/**"] and all(h["doc_id"].startswith("policies/") for h in got[1]["hits"])
    single = json.loads(run("query", "refund window", "-f", "dir=policies/**", "--store", kb, "--json").stdout)
    assert [h["chunk_id"] for h in got[1]["hits"]] == [h["chunk_id"] for h in single["hits"]]
    assert got[1]["decision"] == single["decision"] and got[1]["confidence"] == single["confidence"]
    r = runner.invoke(app, ["query", "--batch", "-", "--store", kb], input="refund window\n")
    assert r.exit_code == 0 and json.loads(r.stdout)["question"] == "refund window"
    bad = write(tmp_path / "bad.txt", "fine question\n{\"question\": 3}\n")
    r = run("query", "--batch", bad, "--store", kb)
    assert r.exit_code != 0 and f"{bad}:2" in r.stderr and "Traceback" not in r.output
    r = run("query", "x", "--batch", bad, "--store", kb)
    assert r.exit_code == 2 and "not both" in r.output


def test_chunks_shows_what_a_document_was_cut_into(sample_store):
    """`kbtool chunks`: every document a line; one document's chunks with section path, lines,
    tokens and the exact text embedded; --over-limit the chunks the model truncates; --json."""
    kb = str(sample_store.path)
    status = json.loads(run("status", "--store", kb, "--json").stdout)
    listing = json.loads(run("chunks", "--store", kb, "--json").stdout)
    assert sum(d["chunks"] for d in listing) == status["chunks"]
    assert sum(d["over_limit"] for d in listing) == status["chunks_over_model_limit"] >= 1
    over = json.loads(run("chunks", "--over-limit", "--store", kb, "--json").stdout)
    assert len(over) == status["chunks_over_model_limit"]
    assert all(c["over_limit"] and c["tokens"] > c["limit"] for c in over)
    doc = over[0]["doc_id"]
    mine = json.loads(run("chunks", doc, "--store", kb, "--json").stdout)
    assert [c["n"] for c in mine] == list(range(len(mine))) and {c["doc_id"] for c in mine} == {doc}
    rows = sample_store.chunks_by_id([c["chunk_id"] for c in mine])
    for c in mine:  # the embedded text is the section prefix and the stored text, as index embeds it
        row = rows[c["chunk_id"]]
        assert c["embedded"].endswith(row["text"]) and c["embedded"].startswith(row["prefix"])
        assert c["section_path"] == row["section_path"]
    assert any(c["lines"] for c in mine)
    r = run("chunks", doc, "--store", kb)
    assert r.exit_code == 0 and "over" in r.stdout and mine[0]["section_path"].split(" > ")[0] in r.stdout
    r = run("chunks", doc[:-1], "--store", kb)
    assert r.exit_code == 1 and f"did you mean '{doc}'" in r.stderr


@pytest.mark.slow
def test_missing_includes_are_named_with_their_file(tmp_path):
    """An include whose file is missing is named (document, directive) with the way out
    (--include-root); --json lists every one; found includes are not listed."""
    docs = tmp_path / "docs"
    write(docs / "sub" / "page.md", "# Page\n\nA snippet:\n\n--8<-- \"snippets/missing.md\"\n\n"
                                    "--8<-- \"snippets/there.md\"\n")
    write(docs / "sub" / "snippets" / "there.md", "The included sentence about kettles.\n")
    kb = tmp_path / "kb"
    r = run("ingest", docs, "--store", kb)
    assert r.exit_code == 0, r.output
    assert "missing include: sub/page.md includes 'snippets/missing.md'" in r.stderr and "--include-root" in r.stderr
    assert "there.md" not in r.stderr
    write(docs / "sub" / "page.md", "# Page\n\nChanged.\n\n--8<-- \"snippets/missing.md\"\n")
    r = run("ingest", docs, "--store", kb, "--json", "-q")
    assert json.loads(r.stdout)["missing_includes"] == [{"doc_id": "sub/page.md", "include": "snippets/missing.md"}]


def test_ingest_counts_skipped_files_by_type_and_names_them_with_v(tmp_path):
    """A docs folder full of images and styles: one line counts the unsupported files by extension
    (not a line each); a reason met by a few files names them, by many names the first few; -v names
    every file; --json keeps every name, grouped by reason, and leaves the unchanged documents out."""
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# Guide\n\nThe server listens on port 8443.\n")
    for i in range(30):
        (docs / "img").mkdir(exist_ok=True)
        (docs / f"img/p{i:02d}.png").write_bytes(b"\x89PNG")
    for i in range(5):
        write(docs / f"css/s{i}.css", "body {}\n")
        write(docs / f"drafts/d{i}.md", "  \n")
    write(docs / "LICENSE", "MIT\n")
    write(docs / "notes/empty.txt", "")
    kb = tmp_path / "kb"
    r = run("ingest", docs, "--store", kb, "--parse-only")
    assert r.exit_code == 0, r.output
    skipped = [ln for ln in r.stderr.splitlines() if ln.startswith("skipped")]
    assert skipped == [
        "skipped 36 files: 30 .png, 5 .css, 1 no extension (unsupported type; -v names them)",
        "skipped 6 files (empty file: nothing to index): drafts/d0.md, drafts/d1.md, drafts/d2.md and 3 more "
        "(-v names them)"], r.stderr
    r = run("ingest", docs, "--store", kb, "--parse-only", "-v")
    assert "skipped img/p29.png: unsupported file type .png" in r.stderr and "skipped drafts/d4.md" in r.stderr
    assert "skipped 36 files: 30 .png, 5 .css, 1 no extension (unsupported type)" in r.stderr
    r = run("ingest", docs, "--store", kb, "--parse-only", "--json")
    report = json.loads(r.stdout)
    assert report["skipped"]["unsupported file type .png"][0] == "img/p00.png"
    assert len(report["skipped"]["empty file: nothing to index"]) == 6 and report["counts"]["skipped"] == 42
    assert "unchanged" not in report and report["counts"]["unchanged"] == 1
    r = run("ingest", docs, "--store", kb, "--parse-only", "--json", "-v")
    assert json.loads(r.stdout)["unchanged"] == ["guide.md"]


def test_status_of_an_empty_store_says_the_model_has_not_run_instead_of_question_marks(tmp_path):
    from kbtool.store import Store

    Store.open(tmp_path / "kb", create=True).close()
    r = run("status", "--store", tmp_path / "kb")
    assert r.exit_code == 0, r.output
    assert "?-d" not in r.stdout and "? tokens" not in r.stdout, r.stdout
    assert not re.search(r"^\s*(chunking|last ingest)\s+None", r.stdout, re.M), r.stdout
    model = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("model"))
    assert "all-MiniLM-L6-v2  (not run yet" in model, model
    assert re.search(r"^\s*chunks\s+0\s*$", r.stdout, re.M) and re.search(r"chunking\s+not chunked yet", r.stdout)
    assert re.search(r"indexes\s+nothing ingested yet: run `kbtool ingest PATH`", r.stdout), r.stdout


def test_help_names_values_by_metavar_never_by_python_type():
    """Every command's --help shows `--filter SPEC`, `--top-k N`, `TEXT`, never typer's `<list[str]>`,
    `<int range>`, `<float range>`, `<str>`, `<path>` placeholders (nor any other `<word>`)."""
    import typer.main

    root = typer.main.get_command(app)
    commands = [[]] + [[name] for name in root.commands]
    commands += [[name, sub] for name, group in root.commands.items() for sub in getattr(group, "commands", {})]
    assert ["contract", "show"] in commands and ["query"] in commands
    for command in commands:
        r = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (command, r.output)
        placeholders = re.findall(r"<[A-Za-z][^<>\s]*(?: range)?>", r.stdout)
        assert not placeholders, (command, placeholders)
        assert "[[" not in r.stdout.splitlines()[0], r.stdout.splitlines()[0]  # usage: [PATH]..., not [[PATH]...]...
