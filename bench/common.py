"""What the bench scripts share."""

from __future__ import annotations

import platform


def machine() -> str:
    import os

    mem = ""
    try:
        kb = int(next(l for l in open("/proc/meminfo") if l.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    except Exception:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{mem}, Python {platform.python_version()}"


def gathered_once(store, base, questions: list[str], variants: dict):
    """Candidates of every question gathered once for what any of ``variants`` ({name: contract})
    runs, as ``eval`` gathers them: (searcher over ``base``, candidates, each one's chunk rows,
    seconds the gathering took)."""
    import time

    from kbtool.evaluation.questions import DEFAULT_DEPTH
    from kbtool.query.pipeline import Searcher
    from kbtool.query.routing import gathered_for

    searcher = Searcher.of(store, base)
    t0 = time.perf_counter()
    cands = searcher.gather(questions, depth=DEFAULT_DEPTH, retrievers=gathered_for(store, list(variants.values())))
    seconds = time.perf_counter() - t0
    return searcher, cands, [store.chunks_by_id(c.ids) for c in cands], seconds
