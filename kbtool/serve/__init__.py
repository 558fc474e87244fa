"""kbtool as a server: one warm ``Service`` (service.py) behind the HTTP API (http.py) or the MCP
server (mcp.py); ``--watch`` re-ingests changed sources (watch.py)."""

LOOPBACK = ("127.0.0.1", "localhost", "::1")  # this machine's names: a server bound to one answers only to them
