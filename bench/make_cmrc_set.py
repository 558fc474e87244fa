"""CMRC 2018 as two BEIR folders for Chinese passage retrieval (issue 32): ``eval_sets/cmrc2018/``.

    python bench/make_cmrc_set.py /path/to/cmrc2018        # a checkout of github.com/ymcui/cmrc2018

CMRC 2018 (Cui et al., EMNLP 2019) is a span-extraction reading-comprehension set of questions
written by people on Chinese Wikipedia paragraphs, CC BY-SA 4.0. As a retrieval set each paragraph
is a document (its article's title as the title) and each question's one relevant document is the
paragraph it was asked on; every other paragraph of the split is a distractor:

- ``trial/``: the trial split, 256 paragraphs and 1,000 questions (two more have no text): the set
  weights are chosen on;
- ``dev/``: the development split, 848 paragraphs and 3,219 questions: the set they are judged on.

The files are written byte for byte from ``squad-style-data/cmrc2018_{trial,dev}.json`` (commit
c0eb1b6 of the repository); nothing else is dropped or edited.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "eval_sets" / "cmrc2018"


def convert(source: Path, split: str, out: Path) -> tuple[int, int]:
    data = json.loads(source.read_text(encoding="utf-8"))["data"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for article in data:
        for para in article["paragraphs"]:
            corpus.append({"_id": para["id"], "title": article.get("title", ""), "text": para["context"]})
            for qa in para["qas"]:
                if not qa["question"].strip():
                    continue  # two of the trial split's questions have no text
                queries.append({"_id": qa["id"], "text": qa["question"].strip()})
                qrels.append(f"{qa['id']}\t{para['id']}\t1")
    dump = lambda rows: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)  # noqa: E731
    (out / "corpus.jsonl").write_text(dump(corpus), encoding="utf-8")
    (out / "queries.jsonl").write_text(dump(queries), encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return len(corpus), len(queries)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    repo = Path(sys.argv[1])
    for split in ("trial", "dev"):
        src = repo / "squad-style-data" / f"cmrc2018_{split}.json"
        if not src.is_file():
            sys.exit(f"make_cmrc_set: {src} not found: give a checkout of github.com/ymcui/cmrc2018")
        docs, qs = convert(src, split, OUT / split)
        print(f"{split}: {docs} paragraphs, {qs} questions -> {OUT / split}")


if __name__ == "__main__":
    main()
