#!/usr/bin/env python3
"""compare_trees.py BEFORE AFTER [--per-question]

Reads BEFORE/<set>.json and AFTER/<set>.json (`kbtool eval --json` output written by measure_trees.sh)
and prints Markdown: one table of ranking metrics (set, mode, metric, before, after, delta), one of
refusal counts (answerable wrongly refused / unanswerable correctly refused), and the store sizes
(documents / chunks, from <set>.status.json or <set>.ingest.json). With --per-question, also the
questions whose first relevant rank or refusal changed, per set and mode.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SETS = ("sample", "fastapi", "fastapi-src", "cranfield")
# A set measured on one side only is compared with this one on the other (the same pages and
# questions; fastapi-src only adds the sdist's docs_src/ for include directives to resolve against).
FALLBACK = {"fastapi-src": "fastapi"}
METRICS = ("ndcg@10", "hit_rate@5", "mrr@10")


def load(d: Path, name: str, suffix: str = "") -> dict | None:
    p = d / f"{name}{suffix}.json"
    if not p.is_file() or p.stat().st_size == 0:
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


def fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def delta(a, b) -> str:
    if a is None or b is None:
        return "–"
    d = b - a
    return "0" if abs(d) < 5e-4 else f"{d:+.3f}"


def sizes(d: Path, name: str) -> str:
    st = load(d, name, ".status") or {}
    docs = st.get("documents") if isinstance(st.get("documents"), int) else None
    chunks = st.get("chunks") if isinstance(st.get("chunks"), int) else None
    if docs is None or chunks is None:
        ing = load(d, name, ".ingest") or {}
        docs = docs if docs is not None else len(ing.get("added", [])) if isinstance(ing.get("added"), list) else ing.get("added")
        chunks = chunks if chunks is not None else ing.get("chunks") or (ing.get("index") or {}).get("chunks")
    return f"{docs if docs is not None else '?'} / {chunks if chunks is not None else '?'}"


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    per_q = "--per-question" in argv
    before, after = Path(args[0]), Path(args[1])
    rows, refs, missing, notes = [], [], [], []
    for s in SETS:
        b, a = load(before, s), load(after, s)
        if a is not None and b is None and s in FALLBACK:
            b = load(before, FALLBACK[s])
            if b is not None:
                notes.append(f"{s}: before = BEFORE/{FALLBACK[s]}.json")
        if b is None and a is None and s in FALLBACK:
            continue  # an optional set, measured on neither side
        if b is None or a is None:
            missing.append(f"{s}: {'before' if b is None else ''} {'after' if a is None else ''}".strip())
            if b is None and a is None:
                continue
        modes = list(dict.fromkeys(((b or {}).get("config", {}).get("modes") or []) + ((a or {}).get("config", {}).get("modes") or [])))
        for m in modes:
            for met in METRICS:
                vb = ((b or {}).get("metrics", {}).get(m) or {}).get(met)
                va = ((a or {}).get("metrics", {}).get(m) or {}).get(met)
                rows.append(f"| {s} | {m} | {met} | {fmt(vb)} | {fmt(va)} | {delta(vb, va)} |")
            rb = ((b or {}).get("refusal") or {}).get(m) or {}
            ra = ((a or {}).get("refusal") or {}).get(m) or {}
            def c(r, key):
                return "–" if not r else r.get(key, "–")
            ans = c(rb or ra, "answerable")
            un = c(rb or ra, "unanswerable")
            refs.append(f"| {s} | {m} | {c(rb, 'wrongly_refused')} → {c(ra, 'wrongly_refused')} (of {ans}) "
                        f"| {c(rb, 'correctly_refused')} → {c(ra, 'correctly_refused')} (of {un}) |")
    print("| set | mode | metric | before | after | delta |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print()
    print("| set | mode | answerable refused, before → after | unanswerable refused, before → after |")
    print("| --- | --- | --- | --- |")
    print("\n".join(refs))
    print()
    print("| set | documents / chunks before | documents / chunks after |")
    print("| --- | --- | --- |")
    for s in SETS:
        if load(before, s) is None and load(after, s) is None:
            continue
        bs = s if load(before, s) is not None else FALLBACK.get(s, s)
        print(f"| {s} | {sizes(before, bs)} | {sizes(after, s)} |")
    if notes:
        print("\n" + "; ".join(notes))
    if missing:
        print("\nmissing: " + "; ".join(missing))
    if per_q:
        for s in SETS:
            b, a = load(before, s), load(after, s)
            if a and not b and s in FALLBACK:
                b = load(before, FALLBACK[s])
            if not b or not a:
                continue
            pb = {q["id"]: q for q in b["per_question"]}
            for q in a["per_question"]:
                old = pb.get(q["id"])
                if not old:
                    continue
                for m, mr in q["modes"].items():
                    mo = old["modes"].get(m)
                    if not mo:
                        continue
                    if (mo["first_relevant_rank"], mo["refused"]) != (mr["first_relevant_rank"], mr["refused"]):
                        print(f"{s} {m} {q['id']}: rank {mo['first_relevant_rank']} → {mr['first_relevant_rank']}, "
                              f"refused {mo['refused']} → {mr['refused']}  ({q['question'][:70]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
