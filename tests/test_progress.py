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
    assert re.fullmatch(r"embedding: 20/100 \(20%\), 2\.0 chunks/s, 10 s, ETA 40 s", line), line


def test_megabytes_in_a_blink_print_no_absurd_rate(clock, capsys):
    """33 MB reported 1 ns after the stage started once printed 33000000000.0/s."""
    update = _common._progress_lines()
    update("parsing big.txt (MB)", 0, 33)
    clock[0] += 1e-9
    update("parsing big.txt (MB)", 33, 33)
    line = capsys.readouterr().err.strip()
    assert line == "parsing big.txt (MB): 33/33 (100%), 0.0 s", line


def test_rates_name_their_unit(clock, capsys):
    update = _common._progress_lines()
    update("parsing big.txt (MB)", 0, 400)
    clock[0] += 8.0
    update("parsing big.txt (MB)", 100, 400)
    update("parsing", 0, 2000)
    clock[0] += 2.0
    update("parsing", 2000, 2000)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["parsing big.txt (MB): 100/400 (25%), 12.5 MB/s, 8 s, ETA 24 s",
                     "parsing: 2000/2000 (100%), 1,000 files/s, 2 s"], lines


@pytest.mark.parametrize("done, elapsed, expected", [
    (33_000_000, 1e-3, None), (33, 0.0, None), (33, None, None), (0, 10.0, None),
    (5, 10.0, "0.5 chunks/s"), (1, 100.0, "0.01 chunks/s"), (250_000, 10.0, "25,000 chunks/s"),
])
def test_stage_rate(done, elapsed, expected):
    assert _common.stage_rate("embedding use-m", done, elapsed) == expected


def test_rich_bars_show_no_absurd_rate(clock):
    """On a terminal: the rate and time-left columns wait for RATE_AFTER too, then use the mean."""
    bars = _common.rich_progress(get_time=lambda: clock[0])
    task_id = bars.add_task("parsing big.txt (MB)", total=400)
    clock[0] += 1e-9
    bars.update(task_id, advance=33)
    task = bars.tasks[0]
    rate_col, eta_col = bars.columns[3], bars.columns[4]
    assert rate_col.render(task).plain == "" and eta_col.render(task).plain == "-:--:--"
    clock[0] += 10.0
    bars.update(task_id, advance=67)
    assert rate_col.render(task).plain == "10.0 MB/s"
    assert eta_col.render(task).plain == "0:00:30"
    rendered = " ".join(str(c.render(task)) for c in bars.columns[2:])
    assert not re.search(r"\d{5,}", rendered.replace(",", "")), rendered


def test_the_library_ingest_shows_progress_when_asked(tmp_path, embedder, capsys):
    """Python's ingest() used to be silent for the whole run; progress=True gives the CLI's lines."""
    from kbtool import IngestOptions, Store, ingest

    from .conftest import write

    for i in range(3):
        write(tmp_path / "docs" / f"p{i}.md", f"# Page {i}\n\nText of page {i}.\n")
    store = Store.open(tmp_path / "kb", create=True)
    ingest(store, [tmp_path / "docs"], IngestOptions(), embedder=embedder, progress=True)
    err = capsys.readouterr().err
    for stage in ("parsing: 3/3 (100%)", "chunking: 3/3 (100%)", "embedding: 3/3 (100%)"):
        assert stage in err, err
    ingest(store, [tmp_path / "docs"], embedder=embedder)  # by default: silent
    assert capsys.readouterr().err == ""
