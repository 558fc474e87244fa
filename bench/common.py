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
