"""Chinese documentation (issue 32): each change measured alone, before -> after, on two Chinese
question sets — FastAPI 0.110.0's Chinese docs (``eval_sets/fastapi-zh.jsonl``, 84 pages fetched by
``bench/docs_set.py --set fastapi-zh``) and the sample set's Chinese questions (tag ``zh``) — and
English left as it was (the sample's English questions).

    python bench/run.py --only chinese        # merged into bench/results.json and bench/RESULTS.md
    python bench/chinese.py                   # the same, printed

Each store is built the way the README tells a Chinese user to (``kbtool ingest DOCS --add-model
use-m``) with the built-in contract; a change is switched off by its contract override (``before``)
and on by the built-in default (``after``). Chunk level uses each question's evidence, document
level its pages.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"

# change -> the override that switches it off (the built-in contract has it on)
OLD_CJK_RULES = ("retrieve.rules=[{when: cjk_identifier, weights: {dense: 0.0, bm25: 0.5, 'dense:use-m': 0.5}}, "
                 "{when: identifier, weights: {dense: 0.3, bm25: 0.7}}, "
                 "{when: cjk, weights: {dense: 0.0, bm25: 0.3, 'dense:use-m': 0.7}}, {when: cjk, weights: {dense: 0.1, bm25: 0.9}}, "
                 "{when: {bm25_coverage_below: 0.25}, weights: {dense: 1.0, bm25: 0.0}}, "
                 "{when: {bm25_coverage_below: 0.35}, weights: {dense: 0.8, bm25: 0.2}}]")
CHANGES = {"question words (preprocess.cjk_question_words)": ["preprocess.cjk_question_words=keep"],
           # before: the cjk_identifier rule fuses as the identifier rule after it did (bm25 0.7, MiniLM 0.3)
           "Chinese questions naming an identifier (rule cjk_identifier)": ["retrieve.rules.0.weights={dense: 0.3, bm25: 0.7}"],
           # before: every Chinese question bm25 0.3 / use-m 0.7, whatever BM25 found of it
           "Chinese questions by BM25 coverage (rules {type: cjk, bm25_coverage_below: 0.4} and cjk)": [OLD_CJK_RULES]}
# the sets each change is measured on (CMRC's 3,219 dev questions for the one chosen on its trial set)
CHANGE_SETS = {"Chinese questions by BM25 coverage (rules {type: cjk, bm25_coverage_below: 0.4} and cjk)":
               ("fastapi-zh", "sample", "cmrc-dev")}
MODES = "bm25,dense:use-m,contract"


def _kbtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kbtool", *args], capture_output=True, text=True, cwd=ROOT)


def _store(name: str, docs: Path, *extra: str) -> Path:
    """A store of ``docs`` with use-m added, built once (kept in bench/out/)."""
    store = OUT / f"{name}-zh-kb"
    if not (store / "manifest.json").exists():
        r = _kbtool("ingest", str(docs), "--store", str(store), "--add-model", "use-m", "-q", *extra)
        if r.returncode not in (0, 1):
            raise SystemExit(f"bench: ingest {docs}: {r.stderr.strip()}")
    return store


def _eval(store: Path, questions: Path, level: str, overrides: list[str], modes: str = MODES) -> dict:
    args = ["eval", str(questions), "--store", str(store), "--modes", modes, "--level", level, "--json"]
    for o in overrides:
        args += ["--set", o]
    r = _kbtool(*args)
    if r.returncode not in (0, 3):
        raise SystemExit(f"bench: eval {questions}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def _numbers(summary: dict, tags: list[str]) -> dict:
    ndcg = {m: round(v["ndcg@10"], 3) for m, v in summary["metrics"].items()}
    by_tag = {t: {m: round(v["ndcg@10"], 3) for m, v in summary["by_tag"][t]["metrics"].items()}
              for t in tags if t in summary["by_tag"] and summary["by_tag"][t].get("metrics")}
    refusal = {m: [v["correctly_refused"], v["unanswerable"], v["wrongly_refused"], v["answerable"]]
               for m, v in summary["refusal"].items()}
    return {"ndcg@10": ndcg, "by_tag": by_tag, "refusal": refusal}


ROUTES = ("off", "prefer", "only")


def _prefixed(questions: Path, prefix: str, target: Path) -> Path:
    """The question set with every relevant document id under ``prefix`` (a folder ingested with --id-prefix)."""
    lines = []
    for line in questions.read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            q["relevant"] = [{**r, "doc": prefix + r["doc"]} for r in q.get("relevant", [])]
            lines.append(json.dumps(q, ensure_ascii=False))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def language_routing(en_docs: Path, zh_docs: Path) -> dict:
    """FastAPI's English and Chinese docs in one store (``--id-prefix en/ --meta lang=en``, ``zh/``
    ``lang=zh``), each set's questions under each ``retrieve.language.route``: nDCG@10 (document
    level, the page in the question's language) and the share of top-5 hits in the other language."""
    from kbtool import load_contract, retrieve
    from kbtool.store import Store

    store = OUT / "fastapi-en-zh-kb"
    if not (store / "manifest.json").exists():
        for docs, lang, extra in ((en_docs, "en", ["--add-model", "use-m"]), (zh_docs, "zh", [])):
            r = _kbtool("ingest", str(docs), "--store", str(store), "--id-prefix", f"{lang}/", "--meta", f"lang={lang}",
                        "-q", *extra)
            if r.returncode not in (0, 1):
                raise SystemExit(f"bench: ingest {docs}: {r.stderr.strip()}")
    sets = {"en": _prefixed(ROOT / "eval_sets" / "fastapi-docs.jsonl", "en/", OUT / "fastapi-docs-en.jsonl"),
            "zh": _prefixed(ROOT / "eval_sets" / "fastapi-zh.jsonl", "zh/", OUT / "fastapi-zh-zh.jsonl")}
    out: dict = {}
    kb = Store.open(store)
    for route in ROUTES:
        for lang, path in sets.items():
            summary = _eval(store, path, "doc", [f"retrieve.language.route={route}"])
            qs = [json.loads(x)["question"] for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
            answers = retrieve(kb, load_contract(None, [f"retrieve.language.route={route}"], search=False), qs, top_k=5)
            hits = [h.doc_id for a in answers for h in a.hits]
            other = sum(1 for d in hits if not d.startswith(f"{lang}/"))
            r = summary["refusal"]["contract"]
            out[f"{route} {lang}"] = {"ndcg@10": round(summary["metrics"]["contract"]["ndcg@10"], 3),
                                      "other_language_hits": [other, len(hits)],
                                      "refusal": [r["correctly_refused"], r["unanswerable"], r["wrongly_refused"], r["answerable"]]}
    kb.close()
    return out


def chinese_bench(results: dict) -> dict:
    sys.path.insert(0, str(HERE))
    from docs_set import fetch

    t0 = time.time()
    docs = fetch("fastapi-zh", OUT / "fastapi-zh-docs", OUT / ".sdist")
    cmrc = ROOT / "eval_sets" / "cmrc2018" / "dev"
    sets = {"fastapi-zh": (_store("fastapi", docs), ROOT / "eval_sets" / "fastapi-zh.jsonl", ["chunk", "doc"],
                           ["paraphrase", "exact-id", "how-to", "mixed"]),
            "sample": (_store("sample", ROOT / "sample_corpus"), ROOT / "eval_sets" / "sample.jsonl", ["chunk"],
                       ["zh", "zh-paraphrase", "zh-literal"]),
            "cmrc-dev": (_store("cmrc-dev", cmrc, "--format", "beir"), cmrc, ["doc"], [])}
    out: dict = {"changes": {}}
    for change, off in CHANGES.items():
        rows = {}
        for name in CHANGE_SETS.get(change, ("fastapi-zh", "sample")):
            store, questions, levels, tags = sets[name]
            modes = MODES.replace("bm25,", "bm25,dense,") if name == "cmrc-dev" else MODES
            for level in levels:
                rows[f"{name} {level}"] = {"before": _numbers(_eval(store, questions, level, off, modes), tags),
                                           "after": _numbers(_eval(store, questions, level, [], modes), tags)}
        out["changes"][change] = rows
    from zh_chunks import cuts

    from kbtool.chunk import SEPARATORS
    from zh_chunks import OLD

    out["chunk_cuts"] = {name: {"before": cuts(sets[name][0], OLD), "after": cuts(sets[name][0], list(SEPARATORS))}
                         for name in sets}
    out["routing"] = language_routing(fetch("fastapi", OUT / "fastapi-docs", OUT / ".sdist"), docs)
    from common import machine

    out["machine"], out["seconds"] = machine(), round(time.time() - t0, 1)
    results["chinese"] = out
    return out


def chinese_markdown(r: dict) -> list[str]:
    if not r:
        return []
    lines = ["", f"Chinese documentation (`bench/run.py --only chinese`; {r['machine']}; stores built with "
             "`kbtool ingest DOCS --add-model use-m`, the built-in contract; each change switched off by its "
             "override for *before*; nDCG@10, and refused unanswerable / wrongly refused answerable of the contract):", ""]
    for change, rows in r["changes"].items():
        lines += [f"**{change}**", "", "| set, level | bm25 | dense (MiniLM) | dense:use-m | contract | by tag (contract) | refusals (contract) |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for where, ba in rows.items():
            b, a = ba["before"], ba["after"]
            cells = [f"{b['ndcg@10'].get(m, '–')} → {a['ndcg@10'].get(m, '–')}" if m in a["ndcg@10"] else "–"
                     for m in ("bm25", "dense", "dense:use-m", "contract")]
            tags = ", ".join(f"{t} {b['by_tag'][t]['contract']} → {a['by_tag'][t]['contract']}" for t in a["by_tag"])
            rb, ra = b["refusal"].get("contract"), a["refusal"].get("contract")
            refusals = f"{rb[0]}/{rb[1]}, {rb[2]}/{rb[3]} → {ra[0]}/{ra[1]}, {ra[2]}/{ra[3]}" if rb and rb[1] else "–"
            lines.append(f"| {where} | " + " | ".join(cells) + f" | {tags} | {refusals} |")
        lines.append("")
    if r.get("chunk_cuts"):
        lines += ["**Where chunking cuts Chinese text** (`bench/zh_chunks.py`: every document chunked again by the "
                  "splitter before (a Chinese sentence ends only at 。) and after (。！？ end a sentence, ；，、 a clause)):", "",
                  "| set | chunks | cuts of a unit too long for one chunk | in Chinese text | not at a sentence end | inside a word |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, ba in r["chunk_cuts"].items():
            b, a = ba["before"], ba["after"]
            lines.append(f"| {name} | " + " | ".join(f"{b[k]} → {a[k]}" for k in
                                                    ("chunks", "cuts", "in_chinese", "not_at_sentence_end", "inside_a_word")) + " |")
        lines.append("")
    if r.get("routing"):
        lines += ["**Language routing** (`retrieve.language.route`; FastAPI's English and Chinese docs in one store, "
                  "`--id-prefix en/ --meta lang=en` and `zh/ lang=zh`; document level, the page in the question's language):",
                  "", "| route | English questions (fastapi-docs): nDCG@10, other-language top-5 hits, refusals | "
                  "Chinese questions (fastapi-zh): nDCG@10, other-language top-5 hits, refusals |", "| --- | --- | --- |"]
        for route in ROUTES:
            cells = []
            for lang in ("en", "zh"):
                v = r["routing"][f"{route} {lang}"]
                o, rf = v["other_language_hits"], v["refusal"]
                cells.append(f"{v['ndcg@10']}, {o[0]} of {o[1]}, {rf[0]}/{rf[1]} unanswerable, {rf[2]}/{rf[3]} answerable")
            lines.append(f"| {route} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


if __name__ == "__main__":
    got: dict = {}
    chinese_bench(got)
    print("\n".join(chinese_markdown(got["chinese"])))
