"""A cold ``kbtool query``, this tree against another (a checkout of main), in the same run.

    python bench/cold_query.py --store STORE --baseline /path/to/other/checkout [--rounds 5]

Each round runs every question once with each tree (``python -m kbtool query Q --store S --json``,
a whole process each, alternating trees so a busy minute hurts both alike). Reports the median
and max wall time per tree, the ratio of the medians, and whether both trees gave the same answers
(the ``--json`` output without its timings). CPU time (user + system, of the child process) is
reported beside wall time: on a shared machine it moves less with the neighbours' load. ``--importtime`` adds this tree's heaviest imports of
one cold query (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "how do I add CORS middleware",
    "What is the default port of the development server?",
    "return a custom status code from a path operation",
    "How can I declare optional query parameters?",
    "run background tasks after returning a response",
]


def run_query(tree: Path, store: Path, question: str) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds, the comparable answer) of one whole ``kbtool query`` process."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kbtool", "query", question, "--store", str(store), "--json"],
                          capture_output=True, text=True, env=env, cwd=tree)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"kbtool query failed in {tree}: {proc.stderr.strip()[-400:]}")
    return wall, cpu, comparable(json.loads(proc.stdout))


def comparable(answer: dict) -> dict:
    """The answer without what differs run to run (timings)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not k.endswith("_ms") and k not in ("timings", "latency_ms")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(answer)


def import_costs(store: Path, question: str, top: int = 12) -> list[tuple[str, float]]:
    """The heaviest top-level imports of one cold query of this tree (cumulative ms)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kbtool", "query", question, "--store",
                           str(store), "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
    costs = []
    for line in proc.stderr.splitlines():
        parts = [p for p in line.split("|")]
        if len(parts) == 3 and parts[2].startswith(" ") and not parts[2].startswith("  "):
            try:
                costs.append((parts[2].strip(), round(int(parts[1]) / 1000, 1)))
            except ValueError:
                pass
    return sorted(costs, key=lambda x: -x[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--baseline", type=Path, help="another checkout of kbtool to pair against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("-q", "--question", action="append", help="a question to ask (repeatable; default: five "
                    "English questions about FastAPI's docs)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.store = args.store.resolve()
    questions = args.question or QUESTIONS
    trees = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    for tree in trees.values():  # warm the file cache and any one-time cache (optimised graph, tables)
        run_query(tree, args.store, questions[0])
    times: dict[str, list[float]] = {k: [] for k in trees}
    cpus: dict[str, list[float]] = {k: [] for k in trees}
    answers: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.rounds):
        for q in questions:
            for name, tree in trees.items():
                wall, cpu, ans = run_query(tree, args.store, q)
                times[name].append(wall)
                cpus[name].append(cpu)
                answers[name].append(ans)
    out = {"store": str(args.store), "runs_per_tree": len(times["this"]),
           **{name: {"median_s": round(statistics.median(t), 3), "max_s": round(max(t), 3),
                     "cpu_median_s": round(statistics.median(cpus[name]), 3)} for name, t in times.items()}}
    if args.baseline:
        out["ratio"] = round(out["this"]["median_s"] / out["baseline"]["median_s"], 3)
        out["cpu_ratio"] = round(out["this"]["cpu_median_s"] / out["baseline"]["cpu_median_s"], 3)
        out["same_answers"] = answers["this"] == answers["baseline"]
        if not out["same_answers"]:
            out["differing"] = [questions[i % len(questions)] for i, (a, b) in
                                enumerate(zip(answers["this"], answers["baseline"])) if a != b][:5]
    if args.importtime:
        out["imports_ms"] = dict(import_costs(args.store, questions[0]))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
