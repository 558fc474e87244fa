"""The plain progress lines (CI logs): a stage faster than the clock shows no made-up rate."""

import re

import pytest

from kbtool.cli import _common


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    return now


def test_an_instant_stage_prints_no_rate(clock, capsys):
    update = _common._progress_lines()
    update("chunking", 0, 1)
    update("chunking", 1, 1)  # the clock has not moved
    line = capsys.readouterr().err.strip()
    assert line.startswith("chunking: 1/1 (100%)")
    assert "/s" not in line and "ETA" not in line, line


def test_a_timed_stage_prints_its_rate_and_eta(clock, capsys, monkeypatch):
    monkeypatch.setattr(_common, "PROGRESS_EVERY", 5.0)
    update = _common._progress_lines()
    update("embedding", 0, 100)
    clock[0] += 10.0
    update("embedding", 20, 100)
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(r"embedding: 20/100 \(20%\), 2\.0/s, 10 s, ETA 40 s", line), line
