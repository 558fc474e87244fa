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
COMMANDS = ["ingest", "chunk", "index", "query", "status", "eval", "calibrate", "doctor"]


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


def test_chunk_then_index(docs, tmp_path):
    kb = tmp_path / "kb"
    assert run("ingest", docs, "--store", kb, "-q").exit_code == 0
    r = run("chunk", "--size", "32", "--store", kb, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["indexes_current"] is False
    r = run("query", "port", "--store", kb)
    assert r.exit_code == 1 and "kbtool index" in r.stderr
    r = run("index", "--store", kb, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["chunks"] >= 2


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


def test_strict_ingest_exits_1_on_a_failed_file(docs, tmp_path):
    (docs / "bad.pdf").write_bytes(b"%PDF garbage")
    r = run("ingest", docs, "--store", tmp_path / "kb", "--strict")
    assert r.exit_code == 1 and "bad.pdf" in r.stderr


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
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert sorted(report["added"]) == ["d1", "d2", "d3"] and report["failed"][0]["doc_id"] == "d4"
    r = run("query", "hypersonic shock", "--store", kb, "--json")
    assert json.loads(r.stdout)["hits"][0]["doc_id"] == "d2"
    r = run("ingest", "--format", "beir", beir, "--store", kb, "--json", "-q")
    assert json.loads(r.stdout)["counts"]["unchanged"] == 3

    write(beir / "corpus.jsonl", '{"_id": "d1", "text": "ok"}\n{not json\n')
    r = run("ingest", "--format", "beir", beir, "--store", kb)
    assert r.exit_code == 1 and "corpus.jsonl:2" in r.stderr


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


def test_every_command_and_option_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for command in COMMANDS:
        assert f"kbtool {command}" in readme, command
        r = run(command, "--help")
        assert r.exit_code == 0
        for option in set(re.findall(r"(--[a-z][a-z-]+)", r.stdout)) - {"--help"}:
            assert option in readme, f"{command} {option} is not documented in README.md"


def test_contract_subcommands_and_options_are_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert "kbtool contract init|show|validate" in readme
    for sub in ("init", "show", "validate"):
        r = run("contract", sub, "--help")
        assert r.exit_code == 0
        for option in set(re.findall(r"(--[a-z][a-z-]+)", r.stdout)) - {"--help"}:
            assert option in readme, f"contract {sub} {option} is not documented in README.md"
