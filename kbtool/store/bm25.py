"""The BM25 index: bm25s arrays on disk plus the chunk id of each row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..errors import StoreError
from .files import write_json

# The BM25 settings of a new store (its manifest's ``bm25``). Lucene's IDF,
# log(1 + (N - df + 0.5) / (df + 0.5)), is positive for every term: Robertson's
# log((N - df + 0.5) / (df + 0.5)) is 0 (bm25s clamps it) or negative for a term in more than half
# the chunks, and for every term of a one-chunk store, so such terms matched nothing.
DEFAULT_PARAMS = {"method": "lucene", "k1": 1.2, "b": 0.75}
# IDF variants that give a term in most (or all) chunks no weight, and what replaces them.
_NONNEGATIVE = {"robertson": "lucene", "atire": "lucene"}


def effective_params(params: dict) -> dict:
    """The settings an index is built with: ``params`` (a manifest's ``bm25``) with an IDF that never
    goes to zero or below. A store whose manifest says ``robertson`` (the default before) gets
    Lucene's IDF, so its BM25 changes when it is next rebuilt."""
    out = {**DEFAULT_PARAMS, **params}
    out["method"] = _NONNEGATIVE.get(out["method"], out["method"])
    return out


def idf(method: str, df: int, n: int) -> float:
    """The IDF bm25s gives a term held by ``df`` of ``n`` chunks, by bm25s's own scorer for the
    method (``robertson`` clamped at 0; an index built before ``effective_params`` may hold it)."""
    return float(_bm25s().scoring._select_idf_scorer(method)(df, N=max(n, df, 1)))


RAW_FILE = "raw_postings.npz"  # term frequencies and chunk lengths: BM25 over any subset of the rows


def _raw_postings(vocab: dict[str, int], tokens: list[list[str]]) -> dict[str, np.ndarray]:
    """Term frequency of every (token, row) pair as a CSC matrix (rows ascending per token) and each
    row's length in tokens: what BM25 statistics over a subset of the rows are computed from."""
    from collections import Counter

    cols, rows, tf = [], [], []
    for i, toks in enumerate(tokens):
        for t, n in Counter(toks).items():
            cols.append(vocab[t])
            rows.append(i)
            tf.append(n)
    cols_a, rows_a = np.asarray(cols, dtype=np.int64), np.asarray(rows, dtype=np.int32)
    order = np.lexsort((rows_a, cols_a))
    indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols_a, minlength=len(vocab)), out=indptr[1:])
    return {"indptr": indptr, "rows": rows_a[order], "tf": np.asarray(tf, dtype=np.float32)[order],
            "doc_len": np.asarray([len(t) for t in tokens], dtype=np.int64)}


class Scoped:
    """BM25 statistics over the rows a caller may see (``visible``, a row mask): its chunk count,
    average length and, per token, document frequency and IDF count only those rows, so every
    score equals the score an index built from those rows alone gives (bit for bit: the same
    float32 steps as bm25s)."""

    def __init__(self, index: "BM25Index", visible: np.ndarray):
        self.index, self.visible = index, visible
        raw = index.raw()
        self.n = int(visible.sum())
        self.avg_len = np.asarray(raw["doc_len"][visible]).mean() if self.n else np.float64(1.0)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def postings(self, token_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, float32 scores) of this token among the visible rows."""
        hit = self._cache.get(token_id)
        if hit is not None:
            return hit
        raw, r = self.index.raw(), self.index.retriever
        start, end = raw["indptr"][token_id], raw["indptr"][token_id + 1]
        rows, tf = raw["rows"][start:end], raw["tf"][start:end]
        keep = self.visible[rows]
        rows, tf = rows[keep], tf[keep].astype(np.float64)
        if not len(rows):
            out = (rows, np.zeros(0, dtype=np.float32))
        else:
            idf_value = np.float32(idf(r.idf_method, len(rows), self.n))
            k1, b = r.k1, r.b
            lengths = raw["doc_len"][rows]
            # bm25s: tf / (k1 * ((1 - b) + b * len / avg) + tf) in float64, times the float32 idf, stored as float32
            tfc = tf / (k1 * ((1 - b) + b * lengths / self.avg_len) + tf)
            out = (rows, (np.float64(idf_value) * tfc).astype(np.float32))
        self._cache[token_id] = out
        return out


class BM25Index:
    """bm25s arrays on disk plus the chunk id of each row. A chunk's score is the sum over the query
    terms it holds of idf x tf / (tf + k1 x (1 - b + b x length / average length)), with Lucene's idf
    (``effective_params``): tests/test_bm25.py holds a plain implementation of it as the reference."""

    def __init__(self, retriever, chunk_ids: list[str]):
        self.retriever = retriever
        self.chunk_ids = chunk_ids
        self.row_of = {cid: i for i, cid in enumerate(chunk_ids)}
        self.loaded_state: dict = {}  # the state record this index was loaded with (see ``current``)
        self.path: Path | None = None
        self._raw: dict | None = None
        self._held: dict = {}  # (kind, id of a chunk-id set) -> (the set, its mask or Scoped)

    @staticmethod
    def exists(path: Path) -> bool:
        return (path / "chunk_ids.json").exists()

    @classmethod
    def build(cls, path: Path, chunk_ids: list[str], tokens: list[list[str]], params: dict,
              state: dict | None = None) -> None:
        """Build into a fresh temporary folder, then swap it in; ``state`` (which catalog state it
        holds) is written inside, so the index and its record change together."""

        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if chunk_ids:
            bm25s = _bm25s()
            params = effective_params(params)
            retriever = bm25s.BM25(k1=params["k1"], b=params["b"], method=params["method"])
            retriever.index(tokens, show_progress=False)
            retriever.save(str(tmp), show_progress=False)
            np.savez(tmp / RAW_FILE, **_raw_postings(retriever.vocab_dict, tokens))
        (tmp / "chunk_ids.json").write_text(json.dumps(chunk_ids))
        (tmp / "state.json").write_text(json.dumps(state or {}))
        # Replace, never delete first: a crash leaves either the old or the new index in place.
        old = path.with_name(path.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def state(path: Path) -> dict:
        """The catalog state the index on disk was built from ({} if unknown or missing)."""
        try:
            return json.loads((path / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    @staticmethod
    def set_state(path: Path, state: dict) -> None:
        """Record that the index on disk (unchanged) holds this catalog state (an atomic write)."""
        write_json(path / "state.json", state)

    @staticmethod
    def chunk_ids_on_disk(path: Path) -> list[str] | None:
        """The chunk id of every row of the index in ``path``; None if it is missing or damaged."""
        try:
            ids = json.loads((path / "chunk_ids.json").read_text())
        except (OSError, ValueError):
            return None
        return ids if isinstance(ids, list) and all(isinstance(i, str) for i in ids) else None

    @classmethod
    def load(cls, path: Path) -> "BM25Index":
        if not cls.exists(path):
            raise StoreError(f"no BM25 index in {path.parent}: run `kbtool index`")
        chunk_ids = cls.chunk_ids_on_disk(path)
        retriever = None
        try:
            if chunk_ids is None:
                raise ValueError("chunk_ids.json is unreadable")
            if chunk_ids:
                retriever = _bm25s().BM25.load(str(path), mmap=True, show_progress=False)
        except Exception as exc:  # noqa: BLE001 - any damage of bm25s's files reads the same way
            raise StoreError(f"the BM25 index in {path} is damaged ({exc}): `kbtool index` rebuilds it") from None
        index = cls(retriever, chunk_ids)
        index.path = path
        return index

    def has_raw(self) -> bool:
        """Whether raw postings (term frequencies, lengths) are at hand: saved with the index since
        kbtool 15, else given by ``set_raw``."""
        if self._raw is None and self.path is not None and (self.path / RAW_FILE).exists():
            try:
                with np.load(self.path / RAW_FILE) as f:
                    self._raw = {k: f[k] for k in f.files}
            except (OSError, ValueError) as exc:
                raise StoreError(f"the BM25 index in {self.path} is damaged ({exc}): `kbtool index` rebuilds it") from None
        return self._raw is not None

    def set_raw(self, tokens: list[list[str]]) -> None:
        """Raw postings from each row's tokens (an index saved before they were saved with it)."""
        self._raw = _raw_postings(self.retriever.vocab_dict, tokens)

    def raw(self) -> dict:
        if not self.has_raw():
            raise StoreError("this BM25 index has no raw postings: run `kbtool index --rebuild`")
        return self._raw

    def scoped(self, visible: np.ndarray | None) -> "Scoped | None":
        """Statistics over the visible rows; None when every row is visible (the stored scores hold)."""
        if visible is None or self.retriever is None or bool(visible.all()):
            return None
        return Scoped(self, visible)

    def held(self, kind: str, ids: set[str]):
        """``mask(ids)`` (kind "mask") or ``scoped(mask(ids))`` (kind "scoped"), kept while the same
        set object is asked for again: a filter's scope is one object per catalog generation
        (``Store.memo``), so a server's or an eval's questions build each once, not per question."""
        key = (kind, id(ids))
        got = self._held.get(key)
        if got is not None and got[0] is ids:
            return got[1]
        value = self.mask(ids) if kind == "mask" else self.scoped(self.mask(ids))
        if len(self._held) >= 16:
            self._held.pop(next(iter(self._held.copy()), None), None)  # a copy: request threads share the index
        self._held[key] = (ids, value)
        return value

    def mask(self, allowed: set[str]) -> np.ndarray:
        """A row mask for ``search``: True for the chunks a filter allows. Build it once per filter."""
        mask = np.zeros(len(self.chunk_ids), dtype=bool)
        mask[[self.row_of[c] for c in allowed if c in self.row_of]] = True
        return mask

    def scores(self, tokens: list[str], mask: np.ndarray | None = None,
               scoped: Scoped | None = None) -> np.ndarray | None:
        """BM25 score of every row for these query tokens (0 outside ``mask``); None if the index is
        empty. ``scoped``: statistics over the rows a caller may see (``scoped()``), else all rows."""
        if self.retriever is None:
            return None
        vocab = self.retriever.vocab_dict
        ids = [vocab[t] for t in tokens if t in vocab]
        if not ids:
            return np.zeros(len(self.chunk_ids))
        if scoped is None:
            scores = np.asarray(self.retriever.get_scores(ids), dtype=np.float64)
        else:  # as bm25s sums: float32, token by token in query order
            acc = np.zeros(len(self.chunk_ids), dtype=np.float32)
            for tid in ids:
                rows, data = scoped.postings(tid)
                np.add.at(acc, rows, data)
            scores = acc.astype(np.float64)
        return np.where(mask, scores, 0.0) if mask is not None else scores

    def top(self, scores: np.ndarray | None, k: int) -> list[tuple[str, float]]:
        """Top-k (chunk_id, score) with score > 0 from ``scores()``, ties broken by chunk id."""
        if scores is None:
            return []
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
            # keep every candidate tied with the k-th score so tie-breaking by id is exact
            kth = scores[candidates].min()
            candidates = np.flatnonzero(scores >= kth)
        ranked = sorted(((self.chunk_ids[i], float(scores[i])) for i in candidates), key=lambda x: (-x[1], x[0]))
        return ranked[:k]

    def search(self, tokens: list[str], k: int, mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """Top-k (chunk_id, score) with score > 0, ties broken by chunk id; ``mask`` from ``mask()``."""
        return self.top(self.scores(tokens, mask), k)

    def _postings(self, token_id: int, scoped: Scoped | None = None) -> tuple[np.ndarray, np.ndarray]:
        if scoped is not None:
            return scoped.postings(token_id)
        sc = self.retriever.scores
        start, end = sc["indptr"][token_id], sc["indptr"][token_id + 1]
        return sc["indices"][start:end], sc["data"][start:end]

    def bound(self, tokens: list[str], mask: np.ndarray | None = None, scoped: Scoped | None = None) -> float:
        """The score of a chunk as good as the best chunk on every query token: the sum, over the
        tokens, of the best score any chunk gets for it. A token no chunk holds counts as a rare
        term held once (idf of one chunk x tf-saturation at average length, 1 / (1 + k1)).
        ``scoped``: scores from the statistics of the rows a caller may see."""
        if self.retriever is None:
            return 0.0
        vocab = self.retriever.vocab_dict
        n = len(self.chunk_ids) if mask is None else int(mask.sum())
        k1 = float(getattr(self.retriever, "k1", 1.2))
        method = getattr(self.retriever, "idf_method", None) or DEFAULT_PARAMS["method"]
        rare = idf(method, 1, n) / (1.0 + k1)
        total = 0.0
        for t in tokens:
            if t not in vocab:
                total += rare
                continue
            rows, data = self._postings(vocab[t], scoped)
            if not len(rows) and scoped is None:
                continue  # no stored postings: idf 0 (a Robertson index built before Lucene's)
            if mask is not None:
                data = data[mask[rows]]  # only permitted chunks shape what a caller sees
            total += float(data.max()) if len(data) else rare
        return total

    def has_term(self, token: str, mask: np.ndarray | None = None) -> bool:
        """Whether any chunk (within ``mask``) holds this analysed token."""
        if self.retriever is None:
            return False
        tid = self.retriever.vocab_dict.get(token)
        if tid is None:
            return False
        rows, _ = self._postings(tid)
        if mask is None or not len(rows):
            # in a Robertson index (before Lucene's) a token in most chunks has no stored postings
            return True
        return bool(mask[rows].any())

    def vocabulary(self) -> list[str]:
        return [] if self.retriever is None else list(self.retriever.vocab_dict)

    @classmethod
    def current(cls, path: Path, loaded: "BM25Index | None") -> "BM25Index":
        """``loaded`` if it still is what ``path`` holds, else the index on disk, (re)loaded: a
        long-lived reader sees another process's rebuild, and a load falling between the two
        renames of a swap retries once."""
        on_disk = cls.state(path)
        if loaded is not None and (not on_disk or on_disk == loaded.loaded_state):
            return loaded
        try:
            index = cls.load(path)
        except StoreError:
            import time

            time.sleep(0.2)
            on_disk = cls.state(path)
            index = cls.load(path)
        # Labelled with the state read before loading: a rebuild swapped in during the load makes the
        # next call reload (read after, an old index labelled new was kept for good).
        index.loaded_state = on_disk
        return index


def _bm25s():
    """bm25s, imported without its optional numba and scipy backends (unless the process already
    has them): kbtool uses its numpy code paths only, and those two imports cost ~0.2 s of every
    cold query."""
    import sys

    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    hidden = [m for m in ("numba", "scipy", "scipy.sparse") if m not in sys.modules]
    for m in hidden:
        sys.modules[m] = None  # makes `import m` raise ImportError, which bm25s handles
    try:
        import bm25s
    finally:
        for m in hidden:
            sys.modules.pop(m, None)
    return bm25s
