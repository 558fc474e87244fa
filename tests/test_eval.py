"""kbtool eval: question sets, evidence matching, report, gates, baselines; numbers checked by ranx."""

import json

import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.errors import InputError
from kbtool.evaluation.compare import compare_to_baseline, parse_gate, read_baseline
from kbtool.evaluation.evaluate import EvalConfig, evaluate
from kbtool.evaluation.outputs import write_report
from kbtool.evaluation.questions import load_questions

from .conftest import ROOT, write

SAMPLE_SET = ROOT / "eval_sets" / "sample.jsonl"
runner = CliRunner()


@pytest.fixture(scope="module")
def sample_report(sample_store, retriever):
    qs = load_questions(SAMPLE_SET)
    return evaluate(sample_store, qs, EvalConfig(), retriever=retriever)


# ---- question sets ---------------------------------------------------------------------------
def test_sample_set_is_well_formed_and_big_enough():
    qs = load_questions(SAMPLE_SET)
    assert len(qs.questions) >= 60 and not qs.issues
    tags = {t for q in qs.questions for t in q.tags}
    assert {"exact-id", "paraphrase", "table", "code", "multi-doc", "zh", "unanswerable"} <= tags
    assert sum(not q.answerable for q in qs.questions) >= 10


def test_typer_docs_set_is_well_formed_and_meets_its_counts():
    """eval_sets/typer-docs.jsonl, the held-out set over Typer 0.9.0's docs (bench/docs_set.py --set typer)."""
    qs = load_questions(ROOT / "eval_sets" / "typer-docs.jsonl")
    assert not qs.issues and len(qs.questions) >= 70
    assert all(q.id.startswith("t") for q in qs.questions)
    unanswerable = [q for q in qs.questions if not q.answerable]
    assert len(unanswerable) >= 18 and all("unanswerable" in q.tags for q in unanswerable)
    assert sum("near-miss" in q.tags for q in unanswerable) >= 5
    answerable = [q for q in qs.questions if q.answerable]
    assert sum("paraphrase" in q.tags for q in answerable) >= 16
    assert sum("exact-id" in q.tags for q in answerable) >= 20
    for q in answerable:
        assert q.relevant and all(r.evidence and not r.doc.startswith("/") and "\\" not in r.doc for r in q.relevant)


def test_fastapi_zh_set_is_well_formed_and_meets_its_counts():
    """eval_sets/fastapi-zh.jsonl, Chinese questions over FastAPI 0.110.0's Chinese docs
    (bench/docs_set.py --set fastapi-zh): issue 32's >= 60 questions, >= 15 unanswerable."""
    import re

    qs = load_questions(ROOT / "eval_sets" / "fastapi-zh.jsonl")
    assert not qs.issues and len(qs.questions) >= 60
    assert all(q.id.startswith("z") and re.search(r"[\u4e00-\u9fff]", q.question) for q in qs.questions)
    unanswerable = [q for q in qs.questions if not q.answerable]
    assert len(unanswerable) >= 15 and all("unanswerable" in q.tags for q in unanswerable)
    answerable = [q for q in qs.questions if q.answerable]
    for tag, n in (("paraphrase", 15), ("exact-id", 15), ("how-to", 10), ("mixed", 10)):
        assert sum(tag in q.tags for q in answerable) >= n, tag
    # a paraphrase names no API: no Latin letters at all
    assert not [q.id for q in answerable if "paraphrase" in q.tags and re.search(r"[A-Za-z]", q.question)]
    for q in answerable:
        assert q.relevant and all(r.evidence and not r.doc.startswith("/") and "\\" not in r.doc for r in q.relevant)


def test_cmrc_folders_are_beir_sets_of_chinese_questions_on_their_own_paragraphs():
    """eval_sets/cmrc2018/{trial,dev} (bench/make_cmrc_set.py): issue 32's >= 500 public Chinese
    questions; each question's one relevant document is a paragraph of its own split."""
    import json
    import re

    for split, n_docs, n_qs in (("trial", 256, 1000), ("dev", 848, 3219)):
        folder = ROOT / "eval_sets" / "cmrc2018" / split
        qs = load_questions(folder)
        docs = {json.loads(x)["_id"] for x in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()}
        assert not qs.issues and len(qs.questions) == n_qs and len(docs) == n_docs
        assert all(re.search(r"[\u4e00-\u9fff]", q.question) for q in qs.questions)
        assert all(len(q.relevant) == 1 and q.relevant[0].doc in docs for q in qs.questions)


@pytest.mark.parametrize("lines,message,line", [
    (['{"id": "a", "question": "ok", "relevant": []}', '{"id": "b", "question": '], "not valid JSON", 2),
    (['{"id": "a", "question": "ok"}', '{"id": "a", "question": "again"}'], "duplicate id", 2),
    (['{"id": "a", "question": "  "}'], "empty", 1),
    (['{"id": "a", "question": "q", "relevant": [{"doc": "x", "grade": "high"}]}'], "grade", 1),
    (['{"id": "a", "question": "q", "relevant": "x.md"}'], "must be a list", 1),
])
def test_malformed_sets_name_the_line(tmp_path, lines, message, line):
    path = write(tmp_path / "set.jsonl", "\n".join(lines) + "\n")
    try:
        qs = load_questions(path)
    except InputError as exc:
        assert message in str(exc) and f":{line}" in str(exc)
        return
    fatal = [i for i in qs.issues if i.fatal]
    assert fatal and message in fatal[0].message and fatal[0].line == line


def test_unknown_fields_are_warnings_and_strings_are_doc_ids(tmp_path):
    path = write(tmp_path / "set.jsonl", '{"id": 1, "question": "q", "relevant": ["a.md"], "colour": "red"}\n')
    qs = load_questions(path)
    assert qs.questions[0].relevant[0].doc == "a.md" and qs.questions[0].id == "1"
    assert "colour" in qs.issues[0].message and not qs.issues[0].fatal


def test_beir_and_trec_layouts(tmp_path):
    beir = tmp_path / "beir"
    write(beir / "queries.jsonl", '{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "unjudged"}\n')
    write(beir / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\n")
    qs = load_questions(beir)
    assert [q.id for q in qs.questions] == ["q1"]
    assert {(r.doc, r.grade) for r in qs.questions[0].relevant} == {("d1", 2.0), ("d2", 1.0)}
    write(tmp_path / "q.tsv", "7\tseventh question\n")
    write(tmp_path / "qrels.txt", "7 0 docA 1\n7 0 docB 0\n")
    qs = load_questions(tmp_path / "q.tsv", qrels=tmp_path / "qrels.txt")
    assert qs.questions[0].question == "seventh question" and len(qs.questions[0].relevant) == 2


def test_an_empty_beir_query_is_flagged_not_asked(tmp_path):
    beir = tmp_path / "beir"  # as two of CMRC 2018's trial questions are
    write(beir / "queries.jsonl", '{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": " "}\n')
    write(beir / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    qs = load_questions(beir)
    assert [q.id for q in qs.questions] == ["q1"]
    assert len(qs.issues) == 1 and "'q2' is empty" in str(qs.issues[0]) and "queries.jsonl:2" in str(qs.issues[0])


def test_lint_flags_documents_and_evidence_the_store_lacks(sample_store, tmp_path):
    from kbtool.evaluation.questions import lint_against_store

    path = write(tmp_path / "set.jsonl", "\n".join([
        '{"id": "a", "question": "q", "relevant": [{"doc": "missing.md"}]}',
        '{"id": "b", "question": "q", "relevant": [{"doc": "zh/faq.md", "evidence": "not in there at all"}]}',
        '{"id": "c", "question": "q", "relevant": [{"doc": "billing/plans.csv", "evidence": "Team,24,1000"}]}',
    ]) + "\n")
    qs = load_questions(path)
    lint_against_store(qs, sample_store)
    messages = [str(i) for i in qs.issues]
    assert len(messages) == 2, messages  # CSV evidence matches the parsed table despite punctuation
    assert "set.jsonl:1" in messages[0] and "missing.md" in messages[0]
    assert "set.jsonl:2" in messages[1] and "evidence" in messages[1]


# ---- the report -------------------------------------------------------------------------------
def test_report_has_modes_side_by_side_and_tags(sample_report):
    data = sample_report.to_dict()
    assert data["config"]["modes"] == ["bm25", "dense", "contract"]
    assert set(data["metrics"]["contract"]) == {f"{m}@{k}" for m in
                                              ("hit_rate", "mrr", "ndcg", "recall", "precision", "map")
                                              for k in (1, 3, 5, 10)}
    assert data["by_tag"]["exact-id"]["metrics"]["bm25"]["hit_rate@5"] > 0.8
    assert data["by_tag"]["paraphrase"]["metrics"]["dense"]["hit_rate@5"] > \
        data["by_tag"]["paraphrase"]["metrics"]["bm25"]["hit_rate@5"]
    d = data["fused_vs_best_single"]["contract"]["ndcg@10"]
    assert d["delta"] == pytest.approx(d["value"] - d["best_single_value"], abs=1e-6)
    assert data["question_set"]["unanswerable"] >= 10
    assert json.loads(json.dumps(data)) == data


def test_chunk_level_needs_the_evidence_chunk_not_just_the_document(sample_store, retriever, tmp_path):
    path = write(tmp_path / "set.jsonl", "\n".join([
        '{"id": "doc", "question": "What causes error TW-E5120?", "relevant": ["manual/troubleshooting.md"]}',
        '{"id": "ev", "question": "What causes error TW-E5120?", "relevant": [{"doc": "manual/troubleshooting.md",'
        ' "evidence": "the self-hosted server cannot read from or write to its block storage"}]}',
        '{"id": "wrong", "question": "What causes error TW-E5120?", "relevant": [{"doc": "manual/troubleshooting.md",'
        ' "evidence": "Every problem the agent or the server reports carries an error code"}]}',
    ]) + "\n")
    report = evaluate(sample_store, load_questions(path), EvalConfig(modes=["bm25"], ks=[1]), retriever=retriever)
    by_id = {r.question.id: r for r in report.results}
    assert by_id["doc"].level == "doc" and by_id["ev"].level == "chunk"
    assert by_id["doc"].modes["bm25"].metrics["hit_rate@1"] == 1.0
    assert by_id["ev"].modes["bm25"].metrics["hit_rate@1"] == 1.0
    assert by_id["wrong"].modes["bm25"].metrics["hit_rate@1"] == 0.0  # right document, wrong chunk


def test_thresholds_refuse(sample_store, retriever):
    qs = load_questions(SAMPLE_SET)
    report = evaluate(sample_store, qs, EvalConfig(modes=["dense"], ks=[5], thresholds={"dense": 2.0}),
                      retriever=retriever)
    r = report.refusal()["dense"]
    assert r["correctly_refused"] == r["unanswerable"] and r["wrongly_refused"] == r["answerable"]
    report = evaluate(sample_store, qs, EvalConfig(modes=["dense"], ks=[5], thresholds={"dense": -2.0}),
                      retriever=retriever)
    assert report.refusal()["dense"]["correctly_refused"] == 0


def test_trec_files_rescored_by_ranx_give_the_same_numbers(sample_report, tmp_path):
    ranx = pytest.importorskip("ranx")
    write_report(sample_report, tmp_path)
    qrels = ranx.Qrels.from_file(str(tmp_path / "qrels.trec"), kind="trec")
    names = ["ndcg@10", "mrr@10", "hit_rate@5", "map@10", "recall@10", "precision@5"]
    ours = sample_report.metrics()
    for mode in ("bm25", "dense", "contract"):
        run = ranx.Run.from_file(str(tmp_path / f"run.{mode}.trec"), kind="trec")
        theirs = ranx.evaluate(qrels, run, names)  # same query set in run and qrels: no make_comparable
        for n in names:
            assert theirs[n] == pytest.approx(ours[mode][n], abs=1e-6), (mode, n)


def test_out_writes_every_file(sample_report, tmp_path):
    import pandas as pd

    files = {p.name for p in write_report(sample_report, tmp_path)}
    assert files == {"summary.json", "per_question.csv", "qrels.trec", "run.bm25.trec", "run.dense.trec",
                     "run.contract.trec", "report.html"}
    df = pd.read_csv(tmp_path / "per_question.csv")
    assert len(df) == 3 * len(sample_report.results)
    assert {"first_relevant_rank", "top_score", "ndcg@10", "mode", "tags"} <= set(df.columns)
    html = (tmp_path / "report.html").read_text()
    assert "<svg" in html and "By tag" in html and "<script" not in html


# ---- gates and baselines ------------------------------------------------------------------------
def test_gate_syntax():
    assert parse_gate("ndcg@10=0.6", "hybrid").to_dict() == {"spec": "ndcg@10=0.6", "mode": "hybrid", "metric": "ndcg@10",
                                                   "tag": None, "required": 0.6}
    g = parse_gate("bm25:hit_rate@5[exact-id]=0.9", "hybrid")
    assert (g.mode, g.metric, g.tag, g.required) == ("bm25", "hit_rate@5", "exact-id", 0.9)
    with pytest.raises(InputError):
        parse_gate("ndcg10>0.5", "hybrid")


def test_randomisation_test_matches_the_exact_p_value(sample_report):
    # Five questions all better by the same amount: exactly 2 of 32 sign patterns are as extreme.
    import copy

    report = copy.copy(sample_report)
    answerable = report.answerable()[:5]
    report.results = answerable
    base = {"per_question": [
        {"id": r.question.id, "answerable": True,
         "modes": {m: {"metrics": {k: v - 0.1 for k, v in mr.metrics.items()}} for m, mr in r.modes.items()}}
        for r in answerable]}
    out = compare_to_baseline(report, read_baseline(base, report.config.modes), permutations=20000, seed=1)
    v = out["modes"]["contract"]["metrics"]["ndcg@10"]
    assert v["delta"] == pytest.approx(0.1, abs=1e-9)
    assert v["p_value"] == pytest.approx(2 / 32, abs=0.01)
    assert len(out["modes"]["contract"]["better"]) == 5


def test_cli_eval_json_out_gates_and_baseline(sample_store, tmp_path):
    store = str(sample_store.path)
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "--json", "-q", "--modes", "bm25,hybrid",
                            "--k", "5,10", "--out", str(tmp_path / "out"), "--fail-under", "hit_rate@5=0.1"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["gates"][0]["passed"] is True and (tmp_path / "out" / "report.html").exists()

    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "-q", "--modes", "bm25,hybrid",
                            "--fail-under", "ndcg@10=1.0", "--fail-under", "bm25:hit_rate@5[zh]=0.1"])
    assert r.exit_code == 3 and "ndcg@10=1.0" in r.stderr

    baseline = tmp_path / "out" / "summary.json"
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "-q", "--modes", "bm25,hybrid",
                            "--k", "5,10", "--baseline", str(baseline), "--fail-on-regression", "--json"])
    assert r.exit_code == 0, r.output
    b = json.loads(r.stdout)["baseline"]["modes"]["hybrid"]["metrics"]["ndcg@10"]
    assert b["delta"] == 0 and b["p_value"] == 1.0 and not b["significant"]

    better = json.loads(baseline.read_text())
    for q in better["per_question"]:
        for m in q["modes"].values():
            m["metrics"] = {k: 1.0 for k in m["metrics"]}
    (tmp_path / "better.json").write_text(json.dumps(better))
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "-q", "--modes", "bm25,hybrid",
                            "--k", "5,10", "--baseline", str(tmp_path / "better.json"), "--fail-on-regression"])
    assert r.exit_code == 3 and "regression" in r.stderr


def test_cli_eval_errors(sample_store, tmp_path):
    store = str(sample_store.path)
    bad = write(tmp_path / "bad.jsonl", '{"id": "a", "question": "x", "relevant": []}\n{oops\n')
    r = runner.invoke(app, ["eval", str(bad), "--store", store])
    assert r.exit_code == 1 and "bad.jsonl:2" in r.stderr and "Traceback" not in r.output
    strict = write(tmp_path / "strict.jsonl", '{"id": "a", "question": "x", "relevant": ["nope.md"]}\n')
    assert runner.invoke(app, ["eval", str(strict), "--store", store, "-q"]).exit_code == 0
    r = runner.invoke(app, ["eval", str(strict), "--store", store, "--strict"])
    assert r.exit_code == 1 and "nope.md" in r.stderr
    assert runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "--metrics", "ndgc"]).exit_code == 2
    assert runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", store, "--k", "ten"]).exit_code == 2
    assert runner.invoke(app, ["eval", str(tmp_path / "none.jsonl"), "--store", store]).exit_code == 2


def test_all_unanswerable_set_reports_refusals_only(sample_store, retriever, tmp_path):
    path = write(tmp_path / "u.jsonl", '{"id": "u1", "question": "how do I bake bread", "relevant": []}\n')
    report = evaluate(sample_store, load_questions(path), EvalConfig(thresholds={"dense": 0.9}), retriever=retriever)
    data = report.to_dict()
    assert data["metrics"]["contract"]["ndcg@10"] is None and data["fused_vs_best_single"] == {}
    assert data["refusal"]["dense"]["correctly_refused"] == 1
    r = runner.invoke(app, ["eval", str(path), "--store", str(sample_store.path), "-q", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output


def test_evidence_matches_whole_words_only(sample_store, retriever, tmp_path):
    path = write(tmp_path / "e.jsonl", "\n".join([
        '{"id": "whole", "question": "TW-E5120", "relevant": [{"doc": "manual/troubleshooting.md", '
        '"evidence": "cannot read from or write to its block storage"}]}',
        '{"id": "part", "question": "TW-E5120", "relevant": [{"doc": "manual/troubleshooting.md", '
        '"evidence": "annot read from or write to its block stor"}]}',
    ]) + "\n")
    qs = load_questions(path)
    from kbtool.evaluation.questions import lint_against_store

    lint_against_store(qs, sample_store)
    assert len(qs.issues) == 1 and "'part'" in str(qs.issues[0])
    report = evaluate(sample_store, qs, EvalConfig(modes=["bm25"], ks=[10]), retriever=retriever)
    hits = {r.question.id: r.modes["bm25"].metrics["hit_rate@10"] for r in report.results}
    assert hits == {"whole": 1.0, "part": 0.0}


def test_unreadable_sets_and_missing_qrels_are_one_line_errors(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"id": "a", "question": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(InputError, match="latin1.jsonl:1: not UTF-8"):
        load_questions(bad)
    write(tmp_path / "q.jsonl", '{"_id": "q1", "text": "x"}\n')
    with pytest.raises(InputError, match="no such file"):
        load_questions(tmp_path / "q.jsonl", qrels=tmp_path / "nope.tsv")


def test_grade_zero_only_queries_are_not_questions(tmp_path):
    write(tmp_path / "q.jsonl", '{"_id": "q1", "text": "x"}\n{"_id": "q2", "text": "y"}\n')
    write(tmp_path / "qrels.tsv", "q1 d1 0\nq2 d2 1\n")
    assert [q.id for q in load_questions(tmp_path / "q.jsonl", qrels=tmp_path / "qrels.tsv").questions] == ["q2"]


def test_trec_ids_with_spaces_stay_parseable(sample_store, retriever, tmp_path):
    ranx = pytest.importorskip("ranx")
    path = write(tmp_path / "s.jsonl", '{"id": "q 1", "question": "TW-E5120", '
                                       '"relevant": ["manual/troubleshooting.md"]}\n')
    report = evaluate(sample_store, load_questions(path), EvalConfig(modes=["bm25"], ks=[10]), retriever=retriever)
    write_report(report, tmp_path / "out")
    run = ranx.Run.from_file(str(tmp_path / "out" / "run.bm25.trec"), kind="trec")
    qrels = ranx.Qrels.from_file(str(tmp_path / "out" / "qrels.trec"), kind="trec")
    assert ranx.evaluate(qrels, run, "ndcg@10") == pytest.approx(report.metrics()["bm25"]["ndcg@10"], abs=1e-6)


def test_one_chunk_holding_two_entries_credits_both(sample_store, retriever, tmp_path):
    path = write(tmp_path / "m.jsonl", '{"id": "m", "question": "What causes error TW-E5120?", "relevant": ['
                 '{"doc": "manual/troubleshooting.md", "evidence": "cannot read from or write to its block storage"},'
                 '{"doc": "manual/troubleshooting.md", "evidence": "TW-E5120"}]}\n')
    report = evaluate(sample_store, load_questions(path), EvalConfig(modes=["bm25"], ks=[2]), retriever=retriever)
    assert report.results[0].modes["bm25"].metrics["recall@2"] == 1.0


def test_fusion_does_not_depend_on_depth(sample_store, retriever):
    qs = load_questions(SAMPLE_SET)
    a = evaluate(sample_store, qs, EvalConfig(modes=["hybrid"], ks=[10], metrics=["ndcg"], depth=100), retriever=retriever)
    b = evaluate(sample_store, qs, EvalConfig(modes=["hybrid"], ks=[10], metrics=["ndcg"], depth=300), retriever=retriever)
    assert a.metrics() == b.metrics()


@pytest.mark.parametrize("entry,message", [
    ('{"doc": "a.md", "evidence": 42}', "evidence"),
    ('{"doc": "a.md", "section": ["x"]}', "section"),
    ('{"doc": "a.md", "grade": 1.5}', "whole number"),
    ('{"doc": "a.md", "grade": NaN}', "whole number"),
])
def test_bad_relevant_fields_are_fatal(tmp_path, entry, message):
    path = write(tmp_path / "s.jsonl", '{"id": "a", "question": "q", "relevant": [' + entry + ']}\n')
    with pytest.raises(InputError, match=message):
        load_questions(path)


def test_all_zero_grades_warn_that_the_question_is_unanswerable(tmp_path):
    path = write(tmp_path / "s.jsonl", '{"id": "a", "question": "q", "relevant": [{"doc": "a.md", "grade": 0}]}\n')
    qs = load_questions(path)
    assert not qs.questions[0].answerable and "grade 0" in qs.issues[0].message


def test_cli_eval_fails_fast_and_cleanly(sample_store, tmp_path):
    store = str(sample_store.path)
    base = ["eval", str(SAMPLE_SET), "--store", store, "-q"]
    r = runner.invoke(app, base + ["--fail-on-regression"])
    assert r.exit_code == 2 and "--baseline" in r.stderr
    assert runner.invoke(app, base + ["--fail-under", "ndcg@10=abc"]).exit_code == 2
    r = runner.invoke(app, base + ["--fail-under", "hit_rate@5[unanswerable]=0.5"])
    assert r.exit_code == 2 and "[unanswerable]" in r.stderr  # markup is not eaten
    (tmp_path / "afile").write_text("x")
    assert runner.invoke(app, base + ["--out", str(tmp_path / "afile")]).exit_code == 2
    write(tmp_path / "other.json", '{"per_question": [{"id": "q001", "answerable": true, "modes": {"hybrid": [1]}}]}')
    r = runner.invoke(app, base + ["--baseline", str(tmp_path / "other.json")])
    assert r.exit_code == 1 and "not a kbtool eval JSON" in r.stderr and "Traceback" not in r.output
    r = runner.invoke(app, base + ["--modes", "hybrid,hybrid,bm25", "--metrics", "ndcg,ndcg", "--k", "1,1", "--json"])
    data = json.loads(r.stdout)
    assert data["config"]["modes"] == ["hybrid", "bm25"] and list(data["metrics"]["hybrid"]) == ["ndcg@1"]


def test_markup_in_user_text_is_printed_as_is(sample_store):
    r = runner.invoke(app, ["query", "what does [/v2/shares] return", "--store", str(sample_store.path)])
    assert r.exit_code == 0 and "[/v2/shares]" in r.stdout


def test_a_python_caller_runs_the_eval_workflow_the_command_runs(sample_store, tmp_path):
    """run_eval is what `kbtool eval` does beyond options and rendering: the same report, gates and
    question-set lint (a fatal problem is an InputError, as for calibrate)."""
    from kbtool.evaluation.run import EvalRequest, run_eval

    request = EvalRequest(SAMPLE_SET, modes=["bm25"], ks=[5], gates=["bm25:hit_rate@5=1.0"])
    warned: list[str] = []
    run = run_eval(sample_store, request, warn=warned.append)
    r = runner.invoke(app, ["eval", str(SAMPLE_SET), "--store", str(sample_store.path), "--json", "-q",
                            "--modes", "bm25", "--k", "5", "--fail-under", "bm25:hit_rate@5=1.0"])
    assert r.exit_code == 3 and run.gates_ok is False
    mine, cli = run.report.to_dict(), json.loads(r.stdout)
    assert {k: v for k, v in mine.items() if k != "created_at"} == {k: v for k, v in cli.items() if k != "created_at"}
    bad = write(tmp_path / "bad.jsonl", '{"id": "a", "question": "q", "relevant": [{"doc": "nowhere.md"}]}\n')
    with pytest.raises(InputError, match="problem"):
        run_eval(sample_store, EvalRequest(bad, modes=["bm25"], strict=True))
