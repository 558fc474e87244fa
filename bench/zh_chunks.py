"""Where chunking cuts Chinese text (issue 32, item 5): every document of a store chunked again in
memory by the splitter before 2026-12-07 (``OLD``: Chinese sentences end only at 。) and by today's
(``kbtool.chunk.SEPARATORS``: 。！？ end a sentence, ；，、 a clause), with the store's own model and
chunk parameters. Counts the cuts a unit too long for one chunk gets, those falling inside Chinese
text, those not at a sentence end, and those inside a word (jieba's dictionary words around the cut).

    .venv/bin/python bench/zh_chunks.py STORE [STORE ...]      # prints one JSON line per store
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OLD = [r"\n\n", r"\n", r"。", r"\. ", r"; ", r", ", r" ", r""]
CJK = re.compile(r"[\u4e00-\u9fff]")


def cuts(store_path: Path, separators: list[str]) -> dict:
    from kbtool import chunk as C
    from kbtool.document import Block
    from kbtool.embed import load_embedder
    from kbtool.store import Store
    from kbtool.store.analyzer import _jieba

    store = Store.open(store_path)
    embedder = load_embedder(store.embedding_spec("dense"))
    params = (C.store_params(store) or C.ChunkParams()).resolved(embedder.max_tokens)
    st = {"chunks": 0, "cuts": 0, "in_chinese": 0, "not_at_sentence_end": 0, "inside_a_word": 0}
    split, kept = C._split, list(C.SEPARATORS)

    def counted(unit, budget, p, count):
        out = split(unit, budget, p, count)
        if unit.kind == "code":
            return out
        text = unit.text
        for piece, off, _length in out[:-1]:
            end = off + len(piece.rstrip())
            before, after = text[end - 1:end], text[end:].lstrip()[:1]
            st["cuts"] += 1
            if not (CJK.search(before) or before in "。！？；，、"):
                continue
            st["in_chinese"] += 1
            st["not_at_sentence_end"] += before not in "。！？"
            if CJK.search(before) and CJK.search(after):
                start, pos = max(0, end - 20), 0
                for word in _jieba().cut(text[start:end + 20], HMM=False):
                    if start + pos < end < start + pos + len(word):
                        st["inside_a_word"] += 1
                        break
                    pos += len(word)
        return out

    C.SEPARATORS[:], C._split = separators, counted
    try:
        for doc_id in store.document_ids():
            doc = store.document_for_chunking(doc_id)
            blocks = [Block.from_dict(b) for b in doc["blocks"]]
            st["chunks"] += len(C.chunk_blocks(doc["title"], blocks, params, embedder.count_tokens))
    finally:
        C.SEPARATORS[:], C._split = kept, split
    return st


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    from kbtool.chunk import SEPARATORS

    new = list(SEPARATORS)
    for path in sys.argv[1:]:
        print(json.dumps({"store": path, "before": cuts(Path(path), OLD), "after": cuts(Path(path), new)}))


if __name__ == "__main__":
    main()
