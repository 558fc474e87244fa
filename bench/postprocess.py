"""The post-processing options of the contract (issue 21), each against everything off: what it
does to relevance (``evaluate`` with one named contract per option, sharing one gathering) and
what it adds per query (``pipeline.answer`` with the context block built, candidates gathered
once, options alternated over three rounds; "added" is the median over questions of the
option's time minus the all-off time for the same question).

    python bench/run.py --only postprocess           # the sample corpus, and Cranfield when bench/out/cranfield-kb exists
    python bench/postprocess.py [STORE QUESTIONS]     # one store alone, printed
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# A lexicon of two categories, as in the README: one refusing questions, one redacting results.
LEXICON = """categories:
  pay:
    words: [salary, salaries, "pay band"]
    question: refuse
    message: "Questions about staff pay go to HR, not to this assistant."
    results: drop
  hosts:
    patterns: ['\\b[a-z0-9-]+\\.internal\\b']
    results: redact
"""

# name -> contract overrides; "all off" is the reference (the default contract turns the
# credentials rule on, so it is an option here too).
OPTIONS = {
    "all off": ["postprocess.sensitive.credentials=off"],
    "sensitive: credentials (default)": [],
    "sensitive: + lexicon": ["postprocess.sensitive.lexicon={lexicon}"],
    "diversity: mmr 0.7": ["postprocess.diversity.mmr_lambda=0.7"],
    "diversity: 2 per document": ["postprocess.diversity.max_per_document=2"],
    "expand: section": ["postprocess.expand.mode=section"],
    "expand: neighbours": ["postprocess.expand.mode=neighbours"],
    "freshness: newer": ["postprocess.freshness.prefer=newer"],
    "compress: sentences": ["postprocess.compress.mode=sentences"],
}
TAGS = ("conflict", "long-section", "near-duplicates")


def contracts(lexicon: Path) -> dict:
    """name -> Contract, each with the all-off overrides plus its own (options this version of
    kbtool does not know are left out, and said so)."""
    from kbtool.contract import load_contract
    from kbtool.errors import ContractError

    out = {}
    for name, extra in OPTIONS.items():
        sets = [s.format(lexicon=lexicon) for s in extra]
        if not name.startswith(("all off", "sensitive")):
            sets = OPTIONS["all off"] + sets  # one option at a time
        try:
            c = load_contract(None, sets, search=False)
            c.postprocess.sensitive.rules()
        except ContractError as exc:
            print(f"bench: postprocess {name}: skipped ({exc})", file=sys.stderr)
            continue
        out[name] = c
    return out


def stage_ms(trace: dict) -> float:
    """The post-processing stages' own time in one answer's trace (ms)."""
    t = trace.get("timings_ms", {})
    return sum(t.get(k, 0.0) for k in ("sensitive_ms", "diversity_ms", "freshness_ms", "expand_ms", "compress_ms",
                                       "rerank_ms"))


def one_store(store, qs, lexicon: Path, rounds: int = 3) -> dict:
    from kbtool.evaluation.evaluate import EvalConfig, evaluate
    from kbtool.query.pipeline import answer, gather
    from kbtool.query.tokens import count_tokens_for
    from kbtool.query.scope import scope

    cs = contracts(lexicon)
    t = time.perf_counter()
    report = evaluate(store, qs, EvalConfig(modes=list(cs), ks=[1, 5, 10], metrics=["ndcg", "hit_rate", "recall"],
                                            contract_names=list(cs)), contracts=cs)
    eval_s = time.perf_counter() - t
    metrics, spread = report.metrics(), report.diversity()
    tags = [t for t in TAGS if any(t in q.tags for q in qs.questions)]
    conflict = [r for r in report.results if "conflict" in r.question.tags]

    # Latency: candidates once (every option runs over the same ones), then answer() per option.
    base = cs["all off"]
    questions = [q.question for q in qs.questions]
    count = count_tokens_for(store)
    cands = gather(store, base, questions, sc=scope(store, base))
    scopes = {n: scope(store, c) for n, c in cs.items()}
    for n, c in cs.items():  # warm each option (model tokenizer, lexicon, vectors)
        answer(store, c, cands[0], sc=scopes[n], count_tokens=count)
    times = {n: np.zeros((rounds, len(cands))) for n in cs}
    tokens = {n: [] for n in cs}
    stage = {n: [] for n in cs}  # the stages' own time, as the trace records it
    flagged = {n: 0 for n in cs}  # conflict questions whose answer flags sources that differ
    flagged_other = {n: 0 for n in cs}  # the other questions whose answer flags some
    tagged = [("conflict" in q.tags) for q in qs.questions]
    for r in range(rounds):
        for i, cand in enumerate(cands):
            for n, c in cs.items():
                t = time.perf_counter()
                a = answer(store, c, cand, sc=scopes[n], count_tokens=count)
                times[n][r, i] = (time.perf_counter() - t) * 1000
                stage[n].append(stage_ms(a.trace))
                if r == 0 and a.decision != "refuse":
                    tokens[n].append(count(a.context))
                if r == 0 and getattr(a, "conflicts", None):
                    flagged[n] += 1 if tagged[i] else 0
                    flagged_other[n] += 0 if tagged[i] else 1
    ref = np.median(times["all off"], axis=0)
    out = {"questions": len(questions), "conflict_questions": len(conflict), "eval_s": round(eval_s, 1), "options": {}}
    for n in cs:
        own = np.median(times[n], axis=0)
        out["options"][n] = {
            "overrides": OPTIONS[n], "ndcg@10": metrics[n]["ndcg@10"], "hit_rate@5": metrics[n]["hit_rate@5"],
            "recall@10": metrics[n]["recall@10"], "distinct@10": spread[n]["distinct@10"],
            "by_tag_ndcg@10": {t: report.mean(n, "ndcg@10", t) for t in tags},
            # conflict questions whose top hit is not the labelled (newer) page: the older copy first
            "conflict_stale_top": (sum(r.modes[n].top_doc not in {x.doc for x in r.question.relevant} for r in conflict)
                                   if conflict else None),
            "conflicts_flagged": flagged[n] if conflict else None,
            "other_answers_flagged": flagged_other[n],
            "p50_ms": round(float(np.median(own)), 2),
            "stage_p50_ms": round(float(np.median(stage[n])), 3),
            "stage_p95_ms": round(float(np.percentile(stage[n], 95)), 3),
            "added_p50_ms": round(float(np.median(own - ref)), 2),
            "context_tokens_mean": round(float(np.mean(tokens[n])), 1) if tokens[n] else None,
        }
        print(f"bench: postprocess {n}: {out['options'][n]}", file=sys.stderr)
    return out


def postprocess_bench(results: dict) -> dict:
    """Each post-processing option against everything off, on the sample corpus (its question set,
    incl. the conflict / long-section / near-duplicates questions) and on Cranfield when its store
    exists (bench/out/cranfield-kb, built by the full bench)."""
    from datetime import datetime, timezone

    from common import machine

    from kbtool.embed import load_embedder
    from kbtool.evaluation.questions import load_questions
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    lexicon = out_dir / "lexicon.yaml"
    lexicon.write_text(LEXICON)
    store_dir = out_dir / "sample-kb"
    if not (store_dir / "manifest.json").exists():
        shutil.rmtree(store_dir, ignore_errors=True)
    # incremental: brings an older sample store up to the corpus (new pages added, nothing re-embedded)
    ingest(Store.open(store_dir, create=True), [ROOT / "sample_corpus"], embedder=load_embedder())
    r: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "machine": machine(), "stores": {}}
    r["stores"]["sample_corpus"] = one_store(Store.open(store_dir), load_questions(ROOT / "eval_sets" / "sample.jsonl"),
                                             lexicon)
    cran = out_dir / "cranfield-kb"
    dataset = ROOT.parent / "shared" / "datasets" / "cranfield"
    if (cran / "manifest.json").exists() and (dataset / "queries.jsonl").exists():
        r["stores"]["cranfield"] = one_store(Store.open(cran), load_questions(dataset), lexicon)
    results["postprocess"] = r
    return r


def postprocess_markdown(r: dict) -> list[str]:
    if not r:
        return []
    lines = ["", f"Post-processing options (`bench/run.py --only postprocess`; {r['date']}, {r['machine']}; each option "
                 "alone against everything off; added = median over questions of the option's `pipeline.answer` time "
                 "(context block built, candidates gathered once) minus the all-off time):", ""]
    for name, s in r["stores"].items():
        tags = sorted({t for o in s["options"].values() for t in o["by_tag_ndcg@10"]})
        lines += [f"{name} ({s['questions']} questions):", "",
                  "| option | nDCG@10 | hit@5 | distinct@10 | " + "".join(f"{t} nDCG@10 | " for t in tags)
                  + "conflict: older page first / flagged | context tokens | stages p50 / p95 | answer p50 | added p50 |",
                  "| --- " * (9 + len(tags)) + "|"]
        for n, o in s["options"].items():
            by = "".join(f"{o['by_tag_ndcg@10'][t]:.3f} | " if o["by_tag_ndcg@10"].get(t) is not None else "– | "
                         for t in tags)
            stale = ("–" if o.get("conflict_stale_top") is None
                     else f"{o['conflict_stale_top']} / {o['conflicts_flagged']} of {s['conflict_questions']}")
            lines.append(f"| {n} | {o['ndcg@10']:.3f} | {o['hit_rate@5']:.3f} | {o['distinct@10']:.2f} | {by}{stale} | "
                         f"{o['context_tokens_mean']:.0f} | {o['stage_p50_ms']:.2f} / {o['stage_p95_ms']:.2f} ms | "
                         f"{o['p50_ms']:.2f} ms | {o['added_p50_ms']:+.2f} ms |")
        lines.append("")
    return lines


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from kbtool.evaluation.questions import load_questions
    from kbtool.store import Store

    if len(sys.argv) == 3:
        lex = HERE / "out" / "lexicon.yaml"
        lex.parent.mkdir(exist_ok=True)
        lex.write_text(LEXICON)
        print(json.dumps(one_store(Store.open(sys.argv[1]), load_questions(Path(sys.argv[2])), lex), indent=2))
    else:
        print(json.dumps(postprocess_bench({}), indent=2))
