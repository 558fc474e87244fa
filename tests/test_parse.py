from pathlib import Path

import pytest

from kbtool.errors import ParseError
from kbtool.ingestion.parse import _use_blank_spacy, parse_file

from .conftest import SAMPLE, write


def kinds(doc):
    return [b.kind for b in doc.blocks]


def test_markdown_headings_give_section_paths():
    doc = parse_file(SAMPLE / "manual/install.md", "manual/install.md")
    assert doc.filetype == "md" and doc.title
    deep = [b for b in doc.blocks if len(b.section) >= 3]
    assert deep, "nested headings should give three-level section paths"
    assert "table" in kinds(doc) and "code" in kinds(doc)


def test_html_docx_pdf_csv_txt_parse():
    html = parse_file(SAMPLE / "api/reference.html", "api/reference.html")
    assert "table" in kinds(html) and any(len(b.section) >= 2 for b in html.blocks)
    docx = parse_file(SAMPLE / "policies/refund-policy.docx", "policies/refund-policy.docx")
    assert "table" in kinds(docx) and any(b.kind == "title" for b in docx.blocks)
    pdf = parse_file(SAMPLE / "release-notes.pdf", "release-notes.pdf")
    assert {b.page for b in pdf.blocks} == {1, 2, 3, 4}
    csv = parse_file(SAMPLE / "billing/plans.csv", "billing/plans.csv")
    assert csv.blocks[0].kind == "table" and " | " in csv.blocks[0].text
    txt = parse_file(SAMPLE / "support/escalation.txt", "support/escalation.txt")
    assert txt.text.strip()


def test_table_rows_keep_their_cells():
    csv = parse_file(SAMPLE / "billing/plans.csv", "billing/plans.csv")
    lines = csv.blocks[0].text.split("\n")
    header = (SAMPLE / "billing/plans.csv").read_text().splitlines()[0].split(",")
    assert lines[0].split(" | ") == header
    assert len(lines) == len((SAMPLE / "billing/plans.csv").read_text().strip().splitlines())


def test_unstructured_runs_offline_with_a_blank_spacy_pipeline():
    # No network here: without the blank pipeline, unstructured would try to download en_core_web_sm.
    assert _use_blank_spacy() in ("blank", "en_core_web_sm")
    doc = parse_file(SAMPLE / "support/escalation.txt", "support/escalation.txt")
    assert len(doc.blocks) > 3


def test_chinese_markdown():
    doc = parse_file(SAMPLE / "zh/faq.md", "zh/faq.md")
    assert "同步冲突" in doc.text


@pytest.mark.parametrize("name,data,reason", [
    ("empty.md", b"", "empty"),
    ("blank.txt", b"   \n\n", "empty"),
    ("binary.txt", b"abc\x00\x01\x02" * 100, "binary"),
    ("broken.pdf", b"%PDF-1.4 this is not really a pdf", "PDF"),
    ("broken.docx", b"PK\x03\x04 not a zip", "docx"),
    ("photo.png", b"\x89PNG", "unsupported"),
])
def test_bad_files_raise_one_line_parse_errors(tmp_path, name, data, reason):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ParseError) as info:
        parse_file(path, name)
    assert reason.lower() in str(info.value).lower()
    assert "\n" not in str(info.value)


def _zip(entries: dict[str, bytes]) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, body in entries.items():
            z.writestr(name, body)
    return buf.getvalue()


_XLSX_AS_DOCX = _zip({
    "[Content_Types].xml": b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                           b'<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
                           b'officedocument.spreadsheetml.sheet.main+xml"/></Types>',
    "_rels/.rels": b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                   b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
                   b'officeDocument" Target="xl/workbook.xml"/></Relationships>',
    "xl/workbook.xml": b"<x/>"})


@pytest.mark.parametrize("data", [
    _XLSX_AS_DOCX,  # python-docx: "file '<_io.BytesIO object at 0x7f…>' is not a Word file"
    _zip({"word/document.xml": b"<garbage"}),  # KeyError: "There is no item named '[Content_Types].xml' ..."
    _zip({"[Content_Types].xml": b"<garbage", "word/document.xml": b"<x/>"}),
])
def test_a_corrupt_docx_fails_with_one_clean_line_and_no_python_repr(tmp_path, data):
    path = tmp_path / "x.docx"
    path.write_bytes(data)
    with pytest.raises(ParseError) as info:
        parse_file(path, "x.docx")
    msg = str(info.value)
    assert msg.startswith("not a valid DOCX file: ") and "\n" not in msg, msg
    assert "object at 0x" not in msg and "BytesIO" not in msg and not msg.endswith('"'), msg


def test_latin1_text_is_detected(tmp_path):
    path = tmp_path / "old.txt"
    path.write_bytes("Café crème: the résumé of naïve façade owners, encoded in Latin-1.\n".encode("latin-1"))
    doc = parse_file(path, "old.txt")
    assert "Café" in doc.text


def test_explicit_wrong_encoding_is_reported(tmp_path):
    path = write(tmp_path / "a.md", "# Title\n\nÜnïcödé text here.\n")
    with pytest.raises(ParseError, match="ascii"):
        parse_file(path, "a.md", encoding="ascii")


def test_file_over_size_limit(tmp_path):
    path = write(tmp_path / "big.md", "# Big\n\n" + "word " * 1000)
    with pytest.raises(ParseError, match="max-file-size"):
        parse_file(path, "big.md", max_bytes=1000)
