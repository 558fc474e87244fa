"""The retrieval contract: one versioned YAML file that says how a question becomes an answer.

How a question is cleaned and truncated, which retrievers and how many candidates, how they are
fused (and per detected question type), how near-duplicates are dropped, how confident an answer
must be to be given, who may see what, and how hits become an LLM's context block.

    contract = load_contract("kbtool.yaml", overrides=["retrieve.top_k=8"])
    contract = Contract()            # the built-in default, identical to `kbtool contract init`

The model is strict: unknown keys are errors, every error names its path
(``retrieve.top_k: must be greater than 0``). ``dump_yaml(contract, comments=True)`` writes the
commented file `contract init` creates; load -> dump -> load is the identity.

Modules: ``schema`` (the pydantic models, pure data; its sections ``retrieve`` and
``postprocess``, and ``base`` what they share), ``load`` (find, read, ``--set``, validate) and
``file`` (dump, and the calibrated writer).
"""

from ..errors import ContractError
from .base import (
    BUNDLED_RETRIEVERS,
    CONTEXT_FIELDS,
    CONTRACT_FILE,
    FEATURES,
    QUESTION_TYPES,
    RETRIEVER,
    RETRIEVERS,
    RRF_K,
)
from .file import Calibration, FusionProposal, calibrated_contract, calibrated_text, dump_yaml, yaml_load_plain
from .load import (
    MAX_CONTRACT_BYTES,
    apply_override,
    check_against_store,
    contract_named,
    contract_source,
    find_contract,
    format_error,
    lexicon_path,
    load_contract,
    validate_contract,
)
from .postprocess import (
    RERANK_KEY_ENV,
    Compress,
    Context,
    Dedup,
    Diversity,
    Expand,
    Freshness,
    Postprocess,
    Rerank,
    Sensitive,
)
from .retrieve import Fusion, Preprocess, Retrieve, Rule, Weights, When
from .schema import (
    MODEL_FORMAT,
    Access,
    AnswerabilityModel,
    CalibrationRecord,
    Contract,
    DataSpec,
    Decide,
    MetadataField,
    PlattMap,
    Recorded,
    Source,
    Refuse,
    Thresholds,
    Trace,
    default_contract,
)

__all__ = [
    "BUNDLED_RETRIEVERS", "CONTEXT_FIELDS", "CONTRACT_FILE", "FEATURES", "MAX_CONTRACT_BYTES", "MODEL_FORMAT",
    "QUESTION_TYPES", "RERANK_KEY_ENV", "RETRIEVER", "RETRIEVERS", "RRF_K",
    "Access", "AnswerabilityModel", "Calibration", "CalibrationRecord", "Compress", "Context", "Contract", "ContractError", "DataSpec", "Decide",
    "Dedup", "Diversity", "Expand", "Freshness", "Fusion", "FusionProposal", "MetadataField", "PlattMap", "Postprocess",
    "Preprocess", "Recorded", "Refuse", "Rerank", "Retrieve", "Rule", "Sensitive", "Source", "Thresholds", "Trace", "Weights", "When",
    "apply_override", "calibrated_contract", "calibrated_text", "check_against_store", "contract_named", "contract_source", "default_contract",
    "dump_yaml", "find_contract", "format_error", "lexicon_path", "load_contract", "validate_contract",
    "yaml_load_plain",
]
