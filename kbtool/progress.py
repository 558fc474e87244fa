"""Progress for long work (ingest, index, eval, calibrate): a callback ``progress(stage, advance,
total)`` the library calls; ``progress_lines()`` turns it into plain lines, the CLI also into bars.
A call with advance 0 (re)starts a stage: each folder of a run counts anew."""

from __future__ import annotations


PROGRESS_EVERY = 5.0  # seconds between plain progress lines
RATE_AFTER = 0.5  # seconds a stage must have run before its rate means anything
# What a stage counts, for its rate ("12.5 files/s"); a stage named "... (MB)" counts megabytes.
STAGE_UNITS = {"parsing": "files", "chunking": "documents", "embedding": "chunks", "questions": "questions",
               "retrieving": "questions", "scoring": "settings"}


def stage_rate(stage: str, done: float, elapsed: float | None) -> str | None:
    """'12.5 files/s', '3.2 MB/s': the mean rate of a stage since it started; None before
    ``RATE_AFTER`` seconds (a rate over a few milliseconds is noise: 33000000000.0/s) or before
    anything is done."""
    if not elapsed or elapsed < RATE_AFTER or done <= 0:
        return None
    unit = "MB" if stage.endswith("(MB)") else STAGE_UNITS.get(stage.split(" ", 1)[0], "items")
    rate = done / elapsed
    number = f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}" if rate >= 0.1 else f"{rate:.2g}"
    return f"{number} {unit}/s"


def progress_lines(write=None):
    """A progress(stage, advance, total) callback that writes a plain line per stage every
    ``PROGRESS_EVERY`` seconds and when it finishes — counts, rate, ETA — to ``write`` (default:
    standard error). What `kbtool` prints on a pipe, and ``ingest(..., progress=True)``."""
    import time

    if write is None:
        import sys

        def write(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

    state: dict[str, dict] = {}

    def update(stage: str, advance: int, total: int) -> None:
        now = time.monotonic()
        if advance == 0 or stage not in state:  # a stage (re)starts: each folder of a run counts anew
            state[stage] = {"done": 0, "start": now, "last": now, "said_done": False}
        s = state[stage]
        s["done"] += advance
        finished = total and s["done"] >= total
        if s["said_done"] or not (finished or now - s["last"] >= PROGRESS_EVERY):
            return
        s["last"] = now
        elapsed = now - s["start"]
        line = f"{stage}: {s['done']}/{total or '?'}"
        if total:
            line += f" ({100 * s['done'] / total:.0f}%)"
        rate = stage_rate(stage, s["done"], elapsed)
        if rate is None:  # faster than the clock can say: no rate, no ETA
            line += f", {elapsed:.1f} s"
        else:
            line += f", {rate}, {elapsed:.0f} s"
            if total and not finished:
                line += f", ETA {(total - s['done']) * elapsed / s['done']:.0f} s"
        s["said_done"] = bool(finished)
        write(line)

    return update


def resolve(progress):
    """A library ``progress=`` argument: a callback, True (plain lines on standard error) or None."""
    if progress is True:
        return progress_lines()
    return progress or None
