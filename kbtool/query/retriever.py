"""Retrieval modes: named fusion settings over the contract, for `query --mode` and `eval --modes`.

    contract   the contract as written (per-type weights, its fusion)
    dense      the embedding retriever alone
    bm25       the BM25 retriever alone
    hybrid     plain RRF with the contract's default k (60; no per-type rules)
    rrf:K      plain RRF with another k
    weighted:W normalised-score fusion with dense weight W (no per-type rules)

Every mode runs the same pipeline (``kbtool.query.pipeline``); a mode only overrides
``retrieve.fusion`` (and drops ``retrieve.rules`` where the mode states its own weights).
``Retriever`` is a convenience wrapper for scripts and tests: ``Retriever(store).search(q, "bm25")``;
its candidate depth, thresholds and everything else come from the contract it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..contract import RRF_K
from ..errors import UsageError

MODE_HELP = (f"contract (the contract's fusion and rules), dense, bm25, dense:NAME (a model added to the store), "
             f"hybrid (RRF k={RRF_K} of dense and bm25), rrf:K, rrf:R1+R2+... (RRF of these retrievers), "
             "weighted:W (normalised fusion, dense weight W) or weighted:R1=W1+R2=W2+...")


MODE_NAMES = ("contract", "dense", "bm25", "hybrid", "rrf", "weighted")  # a mistyped one gets a did-you-mean
_EQUAL = {"dense": 0.5, "bm25": 0.5}


def parse_mode(mode: str) -> dict | None:
    """The fusion override of a mode (None for 'contract'); raises UsageError for an unknown mode."""
    from ..contract import RETRIEVER

    name, _, arg = mode.partition(":")
    try:
        if name == "contract" and not arg:
            return None
        if RETRIEVER.match(mode):
            return {"method": mode}
        if name == "rrf" and arg and not arg.isdigit():
            parts = arg.split("+")
            if all(RETRIEVER.match(p) for p in parts) and len(set(parts)) == len(parts):
                return {"method": "rrf", "rrf_k": RRF_K, "weights": _only({p: 1.0 / len(parts) for p in parts}),
                        "rules": []}
        if name == "weighted" and "=" in arg:
            pairs = dict(p.split("=", 1) for p in arg.split("+"))
            ws = {k.strip(): float(v) for k, v in pairs.items()}
            if all(RETRIEVER.match(k) and 0.0 <= w <= 1.0 for k, w in ws.items()) and sum(ws.values()) > 0:
                return {"method": "weighted", "weights": _only(ws), "rules": []}
        if name == "hybrid" and not arg:
            return {"method": "rrf", "rrf_k": RRF_K, "weights": _EQUAL, "rules": []}
        if name == "rrf":
            k = int(arg) if arg else RRF_K
            if k > 0:
                return {"method": "rrf", "rrf_k": k, "weights": _EQUAL, "rules": []}
        if name == "weighted":
            w = float(arg) if arg else 0.5
            if 0.0 <= w <= 1.0:
                return {"method": "weighted", "weights": {"dense": w, "bm25": round(1 - w, 10)}, "rules": []}
    except ValueError:
        pass
    from ..errors import did_you_mean

    raise UsageError(f"unknown mode {mode!r}{did_you_mean(mode, MODE_NAMES)}: use {MODE_HELP}")


def _only(weights: dict[str, float]) -> dict[str, float]:
    """Weights naming these retrievers alone (dense and bm25 are 0 unless named)."""
    return {"dense": 0.0, "bm25": 0.0, **weights}


def is_single(mode: str) -> bool:
    over = parse_mode(mode)
    return bool(over) and over["method"] not in ("weighted", "rrf")


def contract_for_mode(contract, mode: str):
    """A copy of ``contract`` with the mode's fusion."""
    over = parse_mode(mode)
    if over is None:
        return contract
    over = dict(over)
    rules = over.pop("rules", None)
    data = contract.model_dump()
    data["retrieve"]["fusion"].update(over)
    if rules is not None:
        data["retrieve"]["rules"] = rules
    # postprocess.sensitive's rules are those compiled when the contract loaded (kbtool.sensitive.compiled)
    return type(contract).model_validate(data)


@dataclass
class RetrieverConfig:
    """What a ``Retriever`` adds to its contract: filters applied to every search. Retrieval settings
    (candidate depth, fusion, RRF k) are the contract's; another k is the mode ``rrf:K``."""

    filters: dict = field(default_factory=dict)


class Retriever:
    """Search a store in any mode through the contract pipeline."""

    def __init__(self, store, embedder=None, config: RetrieverConfig | None = None, contract=None):
        from ..contract import default_contract

        store.require_indexed()
        self.store = store
        self.embedder = embedder
        self.config = config or RetrieverConfig()
        self.contract = contract or default_contract()

    def search(self, query: str, mode: str = "contract", top_k: int = 10, filters: dict | None = None) -> list:
        return self.run([query], [mode], top_k, filters)[mode][0]

    def run(self, queries: Sequence[str], modes: Sequence[str], top_k: int = 10, filters: dict | None = None,
            progress=None) -> dict[str, list[list]]:
        """Hits per mode per query; candidates are gathered once for all modes."""
        from .pipeline import Searcher

        if top_k < 1:
            raise UsageError("top_k must be at least 1 (CLI: --top-k)")
        specs = [f"{k}={v}" for k, v in {**self.config.filters, **(filters or {})}.items()]
        contracts = {m: contract_for_mode(self.contract, m) for m in dict.fromkeys(modes)}
        searcher = Searcher.of(self.store, self.contract, specs, embedder=self.embedder)
        got = searcher.compare(list(queries), contracts, depth=top_k, progress=progress, top_k=top_k, explain=False)
        return {m: [a.hits for a in answers] for m, answers in got.items()}

    def search_many(self, queries: Sequence[str], mode: str = "contract", top_k: int = 10,
                    filters: dict | None = None) -> list[list]:
        """Search several queries, gathering (and embedding) them in one batch."""
        return self.run(queries, [mode], top_k, filters)[mode]
