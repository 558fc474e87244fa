"""`kbtool calibrate --write` changes only the values it calibrates: a hand-written contract keeps
its indentation, comments, quoting, key order, flow style and blank lines everywhere else, byte
for byte (the unified diff, computed here, touches only calibrated lines), and the paths it
records are relative to the contract's folder."""

from __future__ import annotations

import difflib
import json
import re

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from kbtool.contract import (AnswerabilityModel, Calibration, CalibrationRecord, FusionProposal, Thresholds,
                             calibrated_text, load_contract)

from .conftest import write

# 4-space mappings, sequences with their dashes 2 in, comments on many lines (in the model block and
# after values), flow mappings and sequences, single- and double-quoted strings, blank lines, a long
# line, sections in an order that is not the schema's, a comment closing the file.
HAND = """\
# kbtool.yaml: the support bot's retrieval contract.
# Owner: search team.   Reviewed 2026-11.

decide:
    # answerability model, refitted by `kbtool calibrate --write`
    model:
        version: 1
        coefficients:         # signal -> weight
            relevance: 1.5    # the strongest signal
            coverage: 0.20
            absent_top: -1.4
            named_absent_kb: -2.0
            dense_margin: 4.0
        intercept: 0.5        # fitted
        calibration: {slope: 1.0, offset: 1.1}
    thresholds:
        answer: 0.85          # answer plainly at or above
        low_confidence: 0.8

    refuse:
        needs_evidence: true  # refuse only on evidence of absence

contract_version: 3   # bump on every change

data:
    sources:
      - root: "docs/en"       # English pages
        meta: {lang: en}
        exclude: ['release-notes.md', "drafts/**"]
      - root: 'docs/zh'
        id_prefix: zh/
        meta: {lang: zh}

    min_kept_text: 0.95

retrieve:
    top_k: 8          # the UI shows eight
    fusion:
        method: weighted
        weights: {dense: 0.6, bm25: 0.4}   # tuned by hand in November
    rules:
      - when: identifier      # error codes want BM25
        weights: {dense: 0.3, bm25: 0.7}
      - when: cjk
        weights:
            dense: 0.1
            bm25: 0.9

context:
    header: "Answer from these sources only, and cite them: a long line that a YAML writer of width 80 would fold into two."
    refusal: 'Not in the docs.'
    max_tokens: 1200
# end of the contract
"""

# Where calibrate writes: (path prefix, with '*' for any key or index). A line it deletes or
# changes holds one of these; a line it adds too, or starts a rule it appends.
CALIBRATED = [("contract_version",), ("retrieve", "fusion", "method"), ("retrieve", "fusion", "rrf_k"),
              ("retrieve", "fusion", "normalization"), ("retrieve", "fusion", "weights"),
              ("retrieve", "rules", "*", "weights"), ("decide", "model"), ("decide", "thresholds"),
              ("decide", "tiers"), ("decide", "refuse", "needs_evidence"), ("calibration",)]


def line_paths(text: str) -> dict[int, tuple]:
    """Line (0-based) -> the key path of the outermost key or sequence item starting on it."""
    out: dict[int, tuple] = {}

    def walk(node, path):
        if isinstance(node, CommentedMap):
            for k, v in node.items():
                out.setdefault(node.lc.key(k)[0], (*path, k))
                walk(v, (*path, k))
        elif isinstance(node, CommentedSeq):
            for i, v in enumerate(node):
                out.setdefault(node.lc.item(i)[0], (*path, i))
                walk(v, (*path, i))

    walk(YAML().load(text), ())
    return out


def calibrated(path, appended_rules_from: int | None = None) -> bool:
    def matches(pattern):
        return len(path) >= len(pattern) and all(p == "*" or p == k for p, k in zip(pattern, path))

    if appended_rules_from is not None and path[:2] == ("retrieve", "rules") and len(path) > 2 \
            and isinstance(path[2], int) and path[2] >= appended_rules_from:
        return True
    return path is not None and any(matches(p) for p in CALIBRATED)


def assert_only_calibrated_lines_change(old: str, new: str) -> dict:
    """The unified diff of old -> new touches only lines holding calibrated values, or adds
    calibrated keys; every comment and blank line of ``old`` is in ``new``. Returns counts."""
    a, b = old.splitlines(True), new.splitlines(True)
    before, after = line_paths(old), line_paths(new)
    n_rules = len((YAML().load(old).get("retrieve") or {}).get("rules") or [])
    removed = added = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for i in range(i1, i2):
            removed += 1
            assert calibrated(before.get(i)), f"line {i + 1} changed, not a calibrated value: {a[i]!r}"
        for j in range(j1, j2):
            added += 1
            assert calibrated(after.get(j), n_rules), f"line {j + 1} added, not a calibrated value: {b[j]!r}"
    comments = [m.group() for line in a for m in [re.search(r"#.*$", line)] if m]
    assert all(c in new for c in comments)
    assert sum(1 for line in b if not line.strip()) == sum(1 for line in a if not line.strip())
    diff = list(difflib.unified_diff(a, b, n=0))
    assert diff and all(line[0] in "+-@" for line in diff)
    return {"removed": removed, "added": added, "lines": (len(a), len(b))}


def _calibration(questions: str) -> Calibration:
    """What calibrate hands the writer (shaped as a real run's: kbtool.evaluation.calibrate)."""
    model = AnswerabilityModel.model_validate({
        "version": 1, "coefficients": {"relevance": 8.438637, "cosine": 0.671888, "coverage": 7.474726,
                                       "absent_top": -3.668983, "named_absent_kb": -2.745298,
                                       "dense_margin": 1.667809},
        "intercept": -0.240496, "calibration": {"slope": 1.0, "offset": 0.6},
        "fitted_on": {"question_set": "q", "source": questions, "questions": 21, "answerable": 16,
                      "unanswerable": 5, "folds": 3, "seed": 0, "date": "2026-12-07",
                      "oof": {"auc": 0.98, "brier": 0.0358, "calibration_error": 0.0414}}})
    record = CalibrationRecord.model_validate({
        "date": "2026-12-07T20:24:37+00:00", "kbtool_version": "0.1.0",
        "question_set": {"path": questions, "sha256": "38" * 32, "questions": 21, "answerable": 16,
                         "unanswerable": 5},
        "objective": "ndcg@10", "folds": 3, "seed": 0, "adopted": True,
        "heldout": {"chosen": 0.91, "current": 0.88, "gain": 0.03, "p_value": 0.04},
        "answerability": {"fitted": True, "heldout_thresholds": {"refusal_interval": [0.5655, 1.0]}},
        "recorded": {"metrics": {"ndcg@10": 0.9}, "refusal": {"unanswerable": 5, "correctly_refused": 5}}})
    fusion = FusionProposal(method="rrf", normalization="minmax", rrf_k=30, weights={"dense": 0.5, "bm25": 0.5},
                            group_weights={"identifier": {"dense": 0.2, "bm25": 0.8},
                                           "cjk": {"dense": 0.1, "bm25": 0.9}},  # as written: left alone
                            coverage_rules=[{"bm25_coverage_below": 0.3, "weights": {"dense": 0.9, "bm25": 0.1}}])
    return Calibration(fusion=fusion, thresholds=Thresholds(answer=0.9, low_confidence=0.7),
                       tiers={"identifier": Thresholds(answer=0.6, low_confidence=0.5)}, model=model,
                       record=record, needs_evidence=True)


def test_write_changes_only_the_calibrated_lines_of_a_hand_written_contract(tmp_path):
    path = write(tmp_path / "kbtool.yaml", HAND)
    questions = write(tmp_path / "eval" / "q.jsonl", "")
    new = calibrated_text(HAND, load_contract(path), _calibration(str(questions)), where=path)
    counts = assert_only_calibrated_lines_change(HAND, new)
    lines = new.splitlines()
    # a changed value keeps its line's comment; flow style stays flow; the model's comments stay
    assert "        intercept: -0.240496  # fitted" in lines
    assert "        weights: {dense: 0.5, bm25: 0.5}   # tuned by hand in November" in lines
    assert "        calibration: {slope: 1.0, offset: 0.6}" in lines
    assert "            relevance: 8.438637 # the strongest signal" in lines
    assert "      - when: identifier      # error codes want BM25" in lines
    assert "        weights: {dense: 0.2, bm25: 0.8}" in lines
    # a key the file lacked goes at the end of its section, before the blank line that ended it
    i = lines.index("        needs_evidence: true  # refuse only on evidence of absence")
    assert lines[i + 1:i + 5] == ["    tiers:", "        identifier:", "            answer: 0.6",
                                  "            low_confidence: 0.5"] and lines[i + 5] == ""
    assert lines[-1] == "# end of the contract" and "calibration:" in lines
    i = lines.index("      - when:")  # the rule appended, laid out as the others, before the blank line
    assert lines[i:i + 6] == ["      - when:", "            bm25_coverage_below: 0.3", "        weights:",
                              "            dense: 0.9", "            bm25: 0.1", ""]
    c = load_contract(write(tmp_path / "written.yaml", new))
    assert c.contract_version == 4 and c.retrieve.fusion.method == "rrf" and c.retrieve.fusion.rrf_k == 30
    assert [r.weights.as_dict() for r in c.retrieve.rules] == [
        {"dense": 0.2, "bm25": 0.8}, {"dense": 0.1, "bm25": 0.9}, {"dense": 0.9, "bm25": 0.1}]
    assert c.calibration.question_set["path"] == "eval/q.jsonl" == c.decide.model.fitted_on["source"]
    assert c.data.sources[1].root == "docs/zh" and c.context.refusal == "Not in the docs."
    assert counts["removed"] == 13, counts  # contract_version, method, weights, a rule's, model (7), thresholds (2)


def test_write_twice_changes_nothing_more_than_the_version(tmp_path):
    """The same calibration written again: only contract_version moves."""
    path = write(tmp_path / "kbtool.yaml", HAND)
    cal = _calibration(str(tmp_path / "q.jsonl"))
    once = calibrated_text(HAND, load_contract(path), cal, where=path)
    write(path, once)
    twice = calibrated_text(once, load_contract(path), cal, where=path)
    diff = [line for line in difflib.unified_diff(once.splitlines(), twice.splitlines(), n=0, lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert diff == ["-contract_version: 4   # bump on every change", "+contract_version: 5   # bump on every change"]


@pytest.mark.parametrize("inside", [True, False])
def test_recorded_question_set_path_is_relative_to_the_contract_folder(tmp_path, monkeypatch, inside):
    from kbtool.contract.file import recorded_paths

    folder = tmp_path / "repo"
    questions = write((folder if inside else tmp_path / "elsewhere") / "sets" / "q.jsonl", "")
    monkeypatch.chdir(questions.parent)  # the path as typed: relative to the working directory
    cal = recorded_paths(_calibration("q.jsonl"), folder / "kbtool.yaml")
    expected = "sets/q.jsonl" if inside else str(questions.resolve())
    assert cal.record.question_set["path"] == expected == cal.model.fitted_on["source"]
    assert recorded_paths(cal, None) is cal


@pytest.mark.parametrize("layout", [
    ("  ", "  - "),      # what `contract init` writes: 2 spaces, dashes 2 in
    ("  ", "- "),        # dashes at the key
    ("    ", "- "),      # 4 spaces, dashes at the key
])
def test_the_files_own_indentation_is_kept(tmp_path, layout):
    step, dash = layout
    item = " " * len(dash)
    text = (f"contract_version: 1\ndata:\n{step}sources:\n{step}{dash}root: a\n{step}{item}meta: {{lang: en}}\n"
            f"{step}{dash}root: b\nretrieve:\n{step}rules:\n{step}{dash}when: identifier\n"
            f"{step}{item}weights:\n{step}{item}{step}dense: 0.3\n{step}{item}{step}bm25: 0.7\n")
    path = write(tmp_path / "kbtool.yaml", text)
    cal = Calibration(fusion=FusionProposal("weighted", "minmax", 60, {"dense": 0.7, "bm25": 0.3},
                                            {"identifier": {"dense": 0.4, "bm25": 0.6}}))
    new = calibrated_text(text, load_contract(path), cal, where=path)
    assert_only_calibrated_lines_change(text, new)
    assert f"{step}{item}{step}dense: 0.4\n" in new and new.count("\n") == text.count("\n") + 1  # + calibration: {}


@pytest.mark.slow
def test_cli_calibrate_write_on_a_real_store_changes_only_calibrated_lines(tmp_path, monkeypatch, fake_embedder):
    """A real `kbtool calibrate --write` (a small store, the fake embedder as its model) on the
    hand-written contract in the working directory."""
    import kbtool.embed as embed
    from typer.testing import CliRunner

    from kbtool.cli import app
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    from .test_calibrate_logic import TOPICS

    lines = []
    for i, topic in enumerate(TOPICS):
        code = f"TW-E{1000 + i}"
        write(tmp_path / "docs" / f"en{i}.md", f"# Error {code}\n\nError {code} means {topic}. Restart the agent "
                                               f"and try again; if {code} stays, contact support.\n")
        lines.append({"id": f"id{i}", "question": f"What does {code} mean?", "relevant": [f"en{i}.md"]})
        lines.append({"id": f"en{i}", "question": f"why does it say {topic.split(' ', 2)[2]}?", "relevant": [f"en{i}.md"]})
    for i, q in enumerate(["How do I pay with PayPal?", "Is there a dark mode?", "Where is the office in Oslo?",
                           "What does TW-E9999 mean?", "Can I print invoices in Klingon?"]):
        lines.append({"id": f"u{i}", "question": q, "relevant": []})
    write(tmp_path / "eval" / "q.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder).failed
    real = embed.load_embedder
    monkeypatch.setattr(embed, "load_embedder", lambda model=None, **kw: fake_embedder if getattr(
        model, "model", model) == fake_embedder.model_id else real(model, **kw))
    monkeypatch.delenv("KBTOOL_CONTRACT", raising=False)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "kbtool.yaml", HAND)
    r = CliRunner().invoke(app, ["calibrate", "eval/q.jsonl", "--store", "kb", "--min-count", "3", "--folds", "3",
                                 "--write", "--json", "-q"])
    assert r.exit_code == 0, r.output
    written = (tmp_path / "kbtool.yaml").read_text()
    assert json.loads(r.stdout)["diff"] and written != HAND
    counts = assert_only_calibrated_lines_change(HAND, written)
    assert counts["removed"] >= 3  # contract_version and the thresholds at least
    c = load_contract(tmp_path / "kbtool.yaml")
    assert c.contract_version == 4 and c.calibration.question_set["path"] == "eval/q.jsonl"
