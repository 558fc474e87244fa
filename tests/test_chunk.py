import pytest

from kbtool.chunk import ChunkParams, chunk_blocks, make_prefix
from kbtool.errors import InputError
from kbtool.ingestion.parse import Block


def doc_text(blocks):
    return "\n\n".join(b.text for b in blocks)


@pytest.fixture(scope="module")
def count(embedder):
    return embedder.count_tokens


def sample_blocks():
    long_text = " ".join(f"Sentence number {i} explains how the agent retries a failed upload." for i in range(60))
    table = "key | default | description\n" + "\n".join(
        f"sync.option_{i} | {i * 100} | What option {i} controls" for i in range(12))
    code = "server:\n  port: 8443\n  tls: true\n  workers: 4"
    s1, s2 = ["Guide", "Install", "Timeouts"], ["Guide", "Retries"]
    return [
        Block("title", "Guide", ["Guide"], None, 0),
        Block("title", "Install", ["Guide", "Install"], None, 1),
        Block("title", "Timeouts", s1, None, 2),
        Block("text", "Timeouts are set per connection.", s1),
        Block("table", table, s1),
        Block("code", code, s1),
        Block("title", "Retries", s2, None, 1),
        Block("text", long_text, s2, page=3),
    ]


def test_section_paths_and_prefix(count):
    chunks = chunk_blocks("Guide", sample_blocks(), ChunkParams(size=120, overlap=16, hard_max=400), count)
    paths = {c.section_path for c in chunks}
    assert paths == {"Guide > Install > Timeouts", "Guide > Retries"}
    first = chunks[0]
    assert first.prefix == "Guide > Install > Timeouts"  # the title is not repeated
    assert first.embed_text.startswith("Guide > Install > Timeouts\n\n")
    assert make_prefix("Manual", ["Install"]) == "Manual > Install"


def test_sizes_are_counted_with_prefix_and_respected(count):
    params = ChunkParams(size=120, overlap=16, hard_max=400)
    chunks = chunk_blocks("Guide", sample_blocks(), params, count)
    for c in chunks:
        assert c.n_tokens == count(c.embed_text)
        if "key | default" not in c.text:
            assert c.n_tokens <= params.size, c.text[:80]


def test_table_and_code_stay_whole(count):
    blocks = sample_blocks()
    table, code = blocks[4].text, blocks[5].text
    chunks = chunk_blocks("Guide", blocks, ChunkParams(size=120, overlap=16, hard_max=400), count)
    assert any(table in c.text for c in chunks)
    assert any(code in c.text for c in chunks)
    assert count(table) > 120  # larger than size, smaller than hard_max: still one piece


def test_table_over_hard_max_is_split_by_rows_with_header(count):
    blocks = sample_blocks()
    chunks = chunk_blocks("Guide", blocks, ChunkParams(size=60, overlap=8, hard_max=80), count)
    table_chunks = [c for c in chunks if c.text.startswith("key | default | description")]
    assert len(table_chunks) > 1
    rows = [line for c in table_chunks for line in c.text.split("\n")[1:]]
    assert rows == blocks[4].text.split("\n")[1:]  # every row once, in order


def test_long_text_is_split_with_overlap_and_spans_point_into_the_document(count):
    blocks = sample_blocks()
    text = doc_text(blocks)
    chunks = [c for c in chunk_blocks("Guide", blocks, ChunkParams(size=100, overlap=20, hard_max=400), count)
              if c.section_path == "Guide > Retries"]
    assert len(chunks) >= 4
    for a, b in zip(chunks, chunks[1:]):
        assert b.char_start < a.char_end  # overlap
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text
        assert c.page == 3


def test_default_size_fits_the_model(embedder):
    params = ChunkParams().resolved(embedder.max_tokens)
    assert embedder.max_tokens == 256
    assert params.size == 254 and params.hard_max == 508


def test_overlap_default_scales_with_small_sizes():
    assert ChunkParams(size=32).resolved(256).overlap == 8
    assert ChunkParams().resolved(256).overlap == 32


@pytest.mark.parametrize("params", [ChunkParams(size=8), ChunkParams(size=100, overlap=60),
                                    ChunkParams(size=100, hard_max=50)])
def test_bad_parameters_are_refused(params):
    with pytest.raises(InputError):
        params.resolved(256)
