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


# ---- Chinese text (issue 32): cut at sentence ends, then clauses, never inside a word ---------------
ZH_SENTENCES = ["后台任务会在返回响应之后运行", "依赖项可以声明自己的子依赖项吗", "请求体使用 Pydantic 模型来声明",
                "路径参数的值会被转换成声明的类型", "中间件在每个请求之前和之后都会运行"]


def test_chinese_text_is_cut_where_a_sentence_ends(count):
    # ！ and ？ end sentences as 。 does (no 。 here: the old splitter cut these between characters)
    text = "".join(s + ("？" if i % 2 else "！") for i, s in enumerate(ZH_SENTENCES * 6))
    blocks = [Block("title", "指南", ["指南"], None, 0), Block("text", text, ["指南"])]
    chunks = chunk_blocks("指南", blocks, ChunkParams(size=60, overlap=0, hard_max=120), count)
    assert len(chunks) >= 3
    assert all(c.text.endswith(("！", "？")) for c in chunks)
    assert "".join(c.text for c in chunks) == text  # nothing lost, nothing repeated (no overlap)


def test_a_long_chinese_sentence_is_cut_at_a_clause_not_inside_a_word(count):
    text = "，".join(ZH_SENTENCES * 4) + "。"
    blocks = [Block("title", "指南", ["指南"], None, 0), Block("text", text, ["指南"])]
    chunks = chunk_blocks("指南", blocks, ChunkParams(size=60, overlap=0, hard_max=120), count)
    assert len(chunks) >= 2
    assert all(c.text.endswith(("，", "。")) for c in chunks)


def test_english_is_split_as_before(count):
    from kbtool.chunk import SEPARATORS, _splitter

    text = " ".join(f"Sentence {i} explains how retries work; it says so, twice." for i in range(40))
    assert all(s not in text for s in ("。", "！", "？", "；", "，", "、"))
    old = ["\n\n", "\n", "。", ". ", "; ", ", ", " ", ""]
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    before = RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=10, length_function=count, separators=old,
                                            keep_separator="end").split_text(text)
    assert _splitter(50, 10, count).split_text(text) == before
    assert len(SEPARATORS) == len(old) + 2


def test_a_store_chunked_by_an_older_splitter_is_chunked_again(tmp_path, fake_embedder):
    import json

    from kbtool.chunk import SPLITTER, store_params
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# 指南\n\n" + "！".join(ZH_SENTENCES) + "。\n", encoding="utf-8")
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [docs], embedder=fake_embedder).failed
    params = store_params(store)
    assert params.splitter == SPLITTER and not store.documents_to_chunk(params)
    # what a store chunked before the splitter had a version recorded
    old = {k: v for k, v in params.to_dict().items() if k != "splitter"}
    with store.catalog.transaction() as db:
        db.execute("UPDATE documents SET chunked_with=?", (json.dumps(old, sort_keys=True),))
    assert store.documents_to_chunk(params) == ["a.md"]
    assert not ingest(store, [docs], embedder=fake_embedder).failed
    assert not store.documents_to_chunk(params)
