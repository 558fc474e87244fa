"""A server's counters for ``GET /metrics``: requests by endpoint and status, answers by decision,
time per stage, as Prometheus text."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Metrics:
    """Counters for ``GET /metrics`` (Prometheus text)."""

    requests: dict = field(default_factory=dict)  # (endpoint, status) -> n
    decisions: dict = field(default_factory=dict)  # decision -> n
    latency: dict = field(default_factory=dict)  # stage -> [count, sum seconds, buckets]
    lock: threading.Lock = field(default_factory=threading.Lock)

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

    def count(self, endpoint: str, status: int) -> None:
        with self.lock:
            key = (endpoint, status)
            self.requests[key] = self.requests.get(key, 0) + 1

    def decided(self, decision: str) -> None:
        with self.lock:
            self.decisions[decision] = self.decisions.get(decision, 0) + 1

    def observe(self, stage: str, seconds: float) -> None:
        with self.lock:
            rec = self.latency.setdefault(stage, [0, 0.0, [0] * len(self.BUCKETS)])
            rec[0] += 1
            rec[1] += seconds
            for i, b in enumerate(self.BUCKETS):
                if seconds <= b:
                    rec[2][i] += 1

    def text(self, extra: dict[str, float]) -> str:
        lines = ["# HELP kbtool_requests_total Requests by endpoint and HTTP status.",
                 "# TYPE kbtool_requests_total counter"]
        with self.lock:
            for (ep, st), n in sorted(self.requests.items()):
                lines.append(f'kbtool_requests_total{{endpoint="{ep}",status="{st}"}} {n}')
            lines += ["# HELP kbtool_decisions_total Answers by decision (answer, low_confidence, refuse).",
                      "# TYPE kbtool_decisions_total counter"]
            for d, n in sorted(self.decisions.items()):
                lines.append(f'kbtool_decisions_total{{decision="{d}"}} {n}')
            lines += ["# HELP kbtool_stage_seconds Time per stage of a request.",
                      "# TYPE kbtool_stage_seconds histogram"]
            for stage, (n, total, buckets) in sorted(self.latency.items()):
                for b, c in zip(self.BUCKETS, buckets):
                    lines.append(f'kbtool_stage_seconds_bucket{{stage="{stage}",le="{b}"}} {c}')
                lines.append(f'kbtool_stage_seconds_bucket{{stage="{stage}",le="+Inf"}} {n}')
                lines.append(f'kbtool_stage_seconds_sum{{stage="{stage}"}} {total:.6f}')
                lines.append(f'kbtool_stage_seconds_count{{stage="{stage}"}} {n}')
        for name, value in extra.items():
            lines += [f"# TYPE kbtool_{name} gauge", f"kbtool_{name} {value}"]
        return "\n".join(lines) + "\n"
