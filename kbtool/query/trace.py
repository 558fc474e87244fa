"""The trace: what each stage of a query saw, in ``Answer.trace`` and appended to a JSONL file."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .candidates import Candidates

if TYPE_CHECKING:
    from .answer_types import Answer


def top_list(cands: Candidates, which: str, n: int = 20) -> list:
    ranks, scores = cands.ranks.get(which, {}), cands.score(which)
    pos = {c: i for i, c in enumerate(cands.ids)}
    return [[c, round(float(scores[pos[c]]), 6)] for c, _ in sorted(ranks.items(), key=lambda x: x[1])[:n]]


def write_trace(path: str | Path, answers: list[Answer], contract, seconds: float, caller: dict | None = None) -> None:
    """Append one JSONL record per question (with who asked: the principal and permission tags)."""
    run_id = uuid.uuid4().hex[:12]
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            for a in answers:
                rec = {
                    "run_id": run_id, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "contract_version": contract.contract_version, **({"caller": caller} if caller else {}),
                    "question": a.question,
                    "processed": a.processed.to_dict(), "types": a.processed.types, "weights": a.weights,
                    "rule": a.rule,
                    "method": a.method, "filters": a.filters, **a.trace,
                    "hits": [[h.chunk_id, h.score, h.confidence] for h in a.hits],
                    "decision": a.decision, "confidence": a.confidence, "tier": a.tier, "signals": a.signals,
                    "total_ms": round(seconds * 1000 / max(1, len(answers)), 2),
                }
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise InputError(f"trace file {path}: cannot write ({exc.strerror})") from None


# Trace records in the order the trace has always listed them (stages run in ``stages.STAGES`` order).
RECORDS = ("rerank", "diversity", "expand", "sensitive", "compress", "freshness")
SHOWN = 20  # candidates listed per retriever, and fused candidates


def ms(seconds: float) -> float:
    """The one rounding of a time in ``timings_ms``."""
    return round(seconds * 1000, 3)


def answer_trace(st, seconds: float) -> dict:
    """``Answer.trace`` of one question (``st``: its ``stages.AnswerState`` after every stage; ``seconds``:
    the whole of ``answer()``): the candidates, the fused list, each stage's record and timings."""
    cands = st.cands
    return {
        "candidates": {r: top_list(cands, r, SHOWN) for r in ("dense", "bm25", *st.extra)
                       if r in cands.ranks or r in ("dense", "bm25")},
        "fused": [[c, round(s, 6)] for c, s in st.fused[:SHOWN]],
        "dedup_dropped": [[d[0][0], k[0]] for d, k in ((x, x[1]) for x in st.dropped)],
        **{name: st.records[name] for name in RECORDS if name in st.records},
        "timings_ms": {**cands.timings, "fuse_decide_ms": ms(seconds),
                       **{f"{name}_ms": ms(t) for name, t in st.spent.items()}},
    }
