"""The store's model tokenizer, alone (no torch): counts for the context budget, word-piece spans
for truncation and compression."""

from __future__ import annotations

from typing import Callable


def token_spans(store):
    """Model word-piece spans, from the tokenizer alone (no torch)."""
    try:
        from ..embed import load_tokenizer

        tok = load_tokenizer(store.embedding_spec())
    except Exception:  # a model without a tokenizer file: no truncation
        return None

    def spans(text: str) -> list[tuple[int, int]]:
        return [s for s in tok.encode(text, add_special_tokens=False).offsets]

    return spans


def count_tokens_for(store) -> Callable[[str], int]:
    from ..embed import load_tokenizer

    tok = load_tokenizer(store.embedding_spec())
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
