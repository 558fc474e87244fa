"""The added cost of postprocess.sensitive per query: the stage's own time (trace timings_ms.sensitive_ms)
over the sample set's questions, built-in credentials rule alone and with a lexicon.

    python bench/sensitive_cost.py STORE [LEXICON]
"""

import json
import statistics
import sys
from pathlib import Path

from kbtool import load_contract, retrieve
from kbtool.store import Store

store = Store.open(sys.argv[1])
questions = [json.loads(line)["question"] for line in
             (Path(__file__).resolve().parent.parent / "eval_sets" / "sample.jsonl").read_text().splitlines() if line.strip()]
sets = [[]] + ([[f"postprocess.sensitive.lexicon={Path(sys.argv[2]).resolve()}"]] if len(sys.argv) > 2 else [])
for overrides in sets:
    contract = load_contract(overrides=overrides, search=False)
    retrieve(store, contract, questions[:5])  # warm up
    ms = []
    for _ in range(3):
        ms += [a.trace["timings_ms"]["sensitive_ms"] for a in retrieve(store, contract, questions)]
    ms.sort()
    print(f"{'lexicon' if overrides else 'credentials only'}: {len(ms)} queries, p50 {statistics.median(ms):.3f} ms, "
          f"p95 {ms[int(len(ms) * 0.95)]:.3f} ms")
