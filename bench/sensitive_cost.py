"""The added cost of postprocess.sensitive per query: the stage's own time (trace timings_ms.sensitive_ms)
over the sample set's questions, built-in credentials rule alone and with a lexicon. The credentials
rule remembers what it found in a text: "first scan" forgets before each query (a chunk's first
time), the other lines are what a run of many questions (eval, calibrate, serve) mostly pays.

    python bench/sensitive_cost.py STORE [LEXICON]
"""

import json
import statistics
import sys
from pathlib import Path

from kbtool import load_contract, retrieve
from kbtool.credentials import credential_spans
from kbtool.store import Store

store = Store.open(sys.argv[1])
questions = [json.loads(line)["question"] for line in
             (Path(__file__).resolve().parent.parent / "eval_sets" / "sample.jsonl").read_text().splitlines() if line.strip()]
sets = [[]] + ([[f"postprocess.sensitive.lexicon={Path(sys.argv[2]).resolve()}"]] if len(sys.argv) > 2 else [])

def first_scan(store, contract, questions):
    out = []
    for q in questions:
        credential_spans.cache_clear()
        out.append(retrieve(store, contract, q))
    return out


for name, overrides, run in [("credentials only, first scan", [], first_scan),
                             ("credentials only", [], retrieve)] + [("lexicon", o, retrieve) for o in sets[1:]]:
    contract = load_contract(overrides=overrides, search=False)
    retrieve(store, contract, questions[:5])  # warm up
    ms = []
    for _ in range(3):
        ms += [a.trace["timings_ms"]["sensitive_ms"] for a in run(store, contract, questions)]
    ms.sort()
    print(f"{name}: {len(ms)} queries, p50 {statistics.median(ms):.3f} ms, p95 {ms[int(len(ms) * 0.95)]:.3f} ms")
