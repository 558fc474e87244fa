"""The examples of the README and docs/ run: every code block marked `<!-- runnable -->` is executed as it stands,
in a fresh folder holding a copy of sample_corpus/ (as a user would from the repository's root)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

BLOCK = re.compile(r"^<!-- runnable -->\n```(\w+)\n(.*?)^```", re.S | re.M)


DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def runnable_blocks() -> list[tuple[str, str]]:
    return [block for path in DOC_FILES for block in BLOCK.findall(path.read_text(encoding="utf-8"))]


def test_the_readme_marks_its_python_example_runnable():
    langs = [lang for lang, _ in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))]
    assert "python" in langs


@pytest.mark.slow
@pytest.mark.parametrize("n", range(len(runnable_blocks())))
def test_readme_block_runs(n, tmp_path):
    lang, code = runnable_blocks()[n]
    assert lang == "python", f"runnable block {n} is {lang}: only python blocks are run"
    shutil.copytree(ROOT / "sample_corpus", tmp_path / "sample_corpus")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"README block {n} failed:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr
    if "retrieve(" in code:
        assert re.search(r"^(answer|low_confidence|refuse) ", r.stdout, re.M), r.stdout[-2000:]


def test_the_readme_ingest_example_shows_what_ingesting_the_sample_gives(sample_store):
    """The `kbtool ingest sample_corpus` transcript in the README (documents and chunks) is what
    the sample corpus gives today (it once said 134 chunks when the demo made 130)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("$ kbtool ingest sample_corpus\n"):]
    first = re.search(r"^\.kb: (\d+) added.*\nindex: (\d+) chunks, (\d+) embedded", block, re.M)
    again = re.search(r"^\.kb: 0 added, 0 updated, (\d+) unchanged.*\nindex: (\d+) chunks, 0 embedded", block, re.M)
    status = sample_store.status()
    assert first and again, "the README's ingest transcript has changed shape"
    assert int(first[1]) == int(again[1]) == status["documents"]
    assert int(first[2]) == int(first[3]) == int(again[2]) == status["chunks"]
