"""What every section of the contract's schema shares: the strict base model, the names of
question types, retrievers and answerability signals, and the error a cross-field check raises
for one field."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

CONTRACT_FILE = "kbtool.yaml"
QUESTION_TYPES = ("identifier", "cjk", "cjk_identifier", "other")  # cjk_identifier: both at once
RETRIEVERS = ("dense", "bm25")
RRF_K = 60  # the RRF constant of Cormack et al. (2009): retrieve.fusion.rrf_k and the "hybrid" mode
# Answerability signals the pipeline computes (kbtool.query.signals), which decide.model may use.
FEATURES = ("relevance", "cosine", "coverage", "absent_kb", "absent_top", "named_absent_kb", "named_absent_top",
            "agreement", "dense_margin", "bm25_margin", "identifier", "cjk", "terms")
CONTEXT_FIELDS = {"n", "source", "doc_id", "title", "section_path", "page", "text", "confidence", "chunk_id",
                  "citation", "lines", "anchor", "url"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# A retriever: bm25, dense (the store's embedding model) or dense:NAME (a model added to the store).
ADDED_RETRIEVER = r"dense:[a-z0-9][a-z0-9._-]{0,39}"
RETRIEVER = re.compile(rf"^(bm25|dense|{ADDED_RETRIEVER})$")
# Further dense retrievers a built-in rule names: weighed only where the store has them.
BUNDLED_RETRIEVERS = ("dense:use-m",)


def same_kind(name: str, available) -> list[str]:
    """The retrievers a mistyped ``name`` may have meant: added models (dense:NAME) for dense:NAME,
    else dense and bm25 (dense:use-n is not 'dense')."""
    return [a for a in available if (":" in a) == (":" in name)]

class _FieldError(ValueError):
    """A cross-field check's failure that belongs to one field: ``format_error`` names
    ``postprocess.rerank.model``, not ``postprocess.rerank``."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message

