"""Library errors name contract paths or Python parameters, not only CLI flags."""

import pytest

from kbtool.contract import load_contract
from kbtool.embed import parse_model
from kbtool.errors import ContractError, UsageError
from kbtool.query.retriever import Retriever


def test_retriever_names_its_parameter(sample_store):
    with pytest.raises(UsageError, match=r"^top_k must be at least 1 \(CLI: --top-k\)$"):
        Retriever(sample_store).search("anything", mode="bm25", top_k=0)


def test_model_options_name_their_parameters():
    with pytest.raises(UsageError, match=r"^input_type \(CLI: --input-type\) applies to endpoint models"):
        parse_model("sentence-transformers/all-MiniLM-L6-v2", input_type=True)
    with pytest.raises(UsageError, match=r"^model 'openai:nonsense'"):
        parse_model("openai:nonsense")


def test_contract_overrides_are_called_overrides():
    with pytest.raises(ContractError, match=r"^override 'retrieve' \(CLI: --set\): write path=value"):
        load_contract(None, ["retrieve"], search=False)
