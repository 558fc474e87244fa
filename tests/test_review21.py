"""Review of issue 21 (post-processing after fusion): defects found by an adversarial pass, each
pinned by a test that failed before its fix."""

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from kbtool.chunk import ChunkParams
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import ingest
from kbtool.query.freshness import decay
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

AWS = "AKIA" + "QX7RZ2MB4TKW9PLD"  # a fake key id, built so this file holds none verbatim


def _day(s: str) -> tuple:
    return (datetime.fromisoformat(s).replace(tzinfo=timezone.utc), "updated")


def test_decay_of_a_negative_score_with_a_tiny_half_life_does_not_divide_by_zero():
    # z-score fusion gives negative scores; 0.5 ** (age / half_life) underflows to 0.0 for an old
    # document under a short half-life (1 day, 3 years: 0.5 ** 1095): no ZeroDivisionError, finite
    # scores (JSON has no Infinity), older still lower.
    dates = {"new": _day("2024-01-01"), "old": _day("2021-01-01"), "older": _day("2020-01-01")}
    cfg = SimpleNamespace(as_of=None, half_life_days=1.0)
    got, rec = decay([("new#0", 0.5), ("old#0", -0.3), ("older#0", -0.2)], lambda c: c.split("#")[0], dates, cfg)
    assert [c for c, _ in got][0] == "new#0"
    assert all(abs(s) < float("inf") for _, s in got)
    json.dumps(got, allow_nan=False)
