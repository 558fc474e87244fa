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
                    "method": a.method, "filters": a.filters, **a.trace,
                    "hits": [[h.chunk_id, h.score, h.confidence] for h in a.hits],
                    "decision": a.decision, "confidence": a.confidence, "tier": a.tier, "signals": a.signals,
                    "total_ms": round(seconds * 1000 / max(1, len(answers)), 2),
                }
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise InputError(f"trace file {path}: cannot write ({exc.strerror})") from None
