from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from . import app
from ._common import ContractOpt, SetOpt, StoreOpt, err, handle_errors, load_contract_opt


@app.command()
@handle_errors
def serve(
    host: Annotated[str, typer.Option("--host", metavar="ADDR", help="Address to listen on; a non-loopback one serves the network (use --tokens).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="N", min=0, max=65535, help="TCP port (0: a free one, printed when ready).")] = 8765,
    tokens: Annotated[Optional[Path], typer.Option("--tokens", envvar="KBTOOL_SERVE_TOKENS_FILE", metavar="FILE", help="YAML or JSON {TOKEN: {principal: NAME} or {allow: [TAG]}}: every /v1 request then needs Authorization: Bearer TOKEN and reads as its caller [env KBTOOL_SERVE_TOKENS_FILE].")] = None,
    principal: Annotated[Optional[str], typer.Option("--principal", metavar="NAME", help="Without --tokens: every request reads as this principal (access.principals).")] = None,
    allow: Annotated[Optional[List[str]], typer.Option("--allow", metavar="TAG", help="Without --tokens: a permission tag every request holds (repeatable).")] = None,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", metavar="N", min=1, help="Retrievals running at once; the rest wait.")] = 8,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=0, help="Seconds a request may take, waiting included, before a 504 (0: no limit).")] = 30.0,
    mcp: Annotated[Optional[str], typer.Option("--mcp", metavar="stdio|http", help="Serve the Model Context Protocol instead of the HTTP API: stdio (for an agent that starts kbtool) or http (streamable HTTP on --host/--port).")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Re-ingest the store's sources (the contract's data.sources, else the folders it was ingested from) when their files change: debounced, under the writer lock; answers say when the sources changed and are not indexed yet.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", metavar="LEVEL", help="critical, error, warning, info (kbtool's own events: a reload, a re-ingest) or debug (also the server's and libraries' own).")] = "info",
    access_log: Annotated[bool, typer.Option("--access-log", help="Log a line per request on stderr (client, method, path, status).")] = False,
    contract: ContractOpt = None,
    set_: SetOpt = None,
    store: StoreOpt = None,
):
    """Serve the store as the retrieval contract says, warm, to agents: an HTTP API (POST
    /v1/retrieve answers as `kbtool query --json`) or MCP (--mcp)."""
    import contextlib
    import logging
    import sys

    from ..errors import UsageError
    from ..serve import LOOPBACK
    from ..serve.service import Caller, Service

    if mcp not in (None, "stdio", "http"):
        raise typer.BadParameter("write stdio or http", param_hint="--mcp")
    if log_level.lower() not in ("critical", "error", "warning", "info", "debug"):
        raise typer.BadParameter("write critical, error, warning, info or debug", param_hint="--log-level")
    if tokens is not None and (principal or allow):
        raise UsageError("--tokens gives each token its caller: drop --principal/--allow")
    if tokens is not None and mcp is not None:
        raise UsageError("--tokens is for the HTTP API: the MCP server answers as one caller, --principal NAME or "
                         "--allow TAG")
    if host not in LOOPBACK and (mcp == "http" or (mcp is None and tokens is None)):
        # Serving the network with nobody asked who they are: said, not refused (a container's 0.0.0.0)
        err.print(f"warning: kbtool serve on {host} answers anyone who can reach it"
                  + (" (the MCP server has no authentication: put it behind a proxy that has)" if mcp
                     else ": give it --tokens FILE"), highlight=False, markup=False)
    # Logs go to stderr: with --mcp stdio, stdout carries the protocol and nothing else. kbtool's own
    # at --log-level; the libraries' (MCP's per-request news, ...) only at debug, else their warnings.
    level = log_level.upper()
    logging.basicConfig(stream=sys.stderr, level=level if level in ("DEBUG", "ERROR", "CRITICAL") else "WARNING",
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kbtool").setLevel(level)
    # The tokens and the default caller are checked against the contract before the model loads:
    # an unknown principal is an error at startup, naming it.
    checked = load_contract_opt(contract, set_)
    token_map = None
    if tokens is not None:
        from ..serve.http import load_tokens

        token_map = load_tokens(tokens, checked)
    elif principal or allow:
        from ..access import access_tags

        access_tags(checked, principal, allow)
    mcp_server = None
    if mcp is not None:
        try:
            from ..serve import mcp as mcp_server
        except ImportError:
            raise UsageError("--mcp is not available") from None
    caller = Caller(principal=principal, allow=list(allow or []), name=principal or "default")
    with contextlib.redirect_stdout(sys.stderr):  # whatever loading says is chatter: stdout may be MCP's
        service = Service(store, contract, set_ or [])
    watcher = None
    if watch:
        from ..serve.watch import Watcher

        from ..contract import contract_named
        from ..ingestion.sources import binds

        declares = service.contract_path  # a kbtool.yaml found here declares the sources of its own store only
        if declares is not None and not contract_named(contract) and not binds(service.contract, declares, store):
            declares = None
        watcher = Watcher(service, contract=None if declares is None else str(declares))
        watcher.start()
    try:
        if mcp_server is not None:
            mcp_server.run(service, mcp, host=host, port=port, caller=caller, log_level=log_level.lower(),
                           access_log=access_log)
            return
        _serve_http(service, token_map, caller, host, port, max_concurrency, timeout, log_level.lower(), access_log)
    finally:
        if watcher is not None:
            watcher.stop()


def _serve_http(service, tokens, caller, host, port, max_concurrency, timeout, log_level, access_log=False) -> None:
    """uvicorn on a socket bound here (port 0: the system's pick, said in the ready line). Ctrl-C and
    SIGTERM stop it gracefully, and the command exits 0."""
    from ..serve.http import create_app
    from ..serve.server import listen, run_uvicorn
    from ._common import err

    app = create_app(service, tokens, default_caller=caller, max_concurrency=max_concurrency, timeout=timeout, host=host)
    sock, bound = listen(host, port)
    status = service.health()  # for the operator: the whole store
    shown = f"[{host}]" if ":" in host else host
    src = service.contract_source()
    err.print(f"kbtool serve: http://{shown}:{bound} (store {status['store']}, {status['documents']} documents, "
              f"contract {src['path'] or 'built-in'} version {src['version']})", highlight=False, markup=False)
    run_uvicorn(app, sock, log_level, access_log=access_log)
