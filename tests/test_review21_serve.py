"""Review of issue 21: kbtool/serve/ — the MCP search payload carries Answer.conflicts as the HTTP
answer does (failed before the fix)."""

from kbtool.chunk import ChunkParams
from kbtool.contract import load_contract
from kbtool.ingestion.pipeline import ingest
from kbtool.query.pipeline import retrieve
from kbtool.store import Store

from .conftest import write

NEW = "---\nupdated: 2024-10-02\n---\n# Audit log retention\n\nAudit logs are kept for 90 days. After that they are deleted from the archive.\n"
OLD = "---\nupdated: 2023-05-10\n---\n# Audit log retention\n\nAudit logs are kept for 30 days. After that they are deleted from the archive.\n"


def test_mcp_search_payload_carries_the_conflicts(tmp_path, fake_embedder):
    from kbtool.serve.mcp import answer_payload

    write(tmp_path / "docs" / "retention.md", NEW)
    write(tmp_path / "docs" / "retention-old.md", OLD)
    store = Store.open(tmp_path / "kb", create=True, model=fake_embedder.spec)
    assert not ingest(store, [tmp_path / "docs"], embedder=fake_embedder, chunk_params=ChunkParams(size=60, overlap=0)).failed
    got = retrieve(store, load_contract(None, ["postprocess.freshness.prefer=newer"], search=False),
                   "how long are audit logs kept", embedder=fake_embedder)
    assert got.conflicts  # the pair is found
    assert answer_payload(got).get("conflicts") == got.conflicts
