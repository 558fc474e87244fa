"""The server process under both faces (the HTTP API and MCP over HTTP): a socket bound before the
ready line, and uvicorn on it until Ctrl-C or SIGTERM."""

from __future__ import annotations


def listen(host: str, port: int):
    """A listening socket on ``host``:``port`` (0: the system's pick) and the port it got: bound here,
    before the ready line, so the line names the real port and a client may connect at once."""
    import socket

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as exc:
        from ..errors import UsageError

        raise UsageError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    sock.listen(128)
    return sock, sock.getsockname()[1]


def run_uvicorn(app, sock, log_level: str = "info", *, lifespan: str = "off", access_log: bool = False) -> None:
    """uvicorn on ``sock`` until Ctrl-C or SIGTERM, which stop it gracefully: the process then exits 0
    (uvicorn re-raises the signal after shutting down). Every log line goes to stderr. uvicorn's own
    news (started, shutting down) is logged only at ``log_level`` debug — the ready line says it —
    its warnings and errors always; a line per request only with ``access_log``."""
    import contextlib
    import copy
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        def capture_signals(self):
            @contextlib.contextmanager
            def quietly():
                old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
                try:
                    yield
                finally:
                    for s, h in old.items():
                        signal.signal(s, h)

            return quietly()

    logs = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logs["handlers"]["access"]["stream"] = "ext://sys.stderr"  # stdout is for data: every log line on stderr
    level = log_level.upper()
    logs["loggers"]["uvicorn.error"]["level"] = "DEBUG" if level == "DEBUG" else level if level in ("ERROR", "CRITICAL") else "WARNING"
    logs["loggers"]["uvicorn.access"]["level"] = "INFO" if access_log else "WARNING"
    # log_level None: uvicorn leaves the levels set above (it would set one level for both loggers)
    config = uvicorn.Config(app, log_level=None, log_config=logs, access_log=access_log,
                            lifespan=lifespan, timeout_graceful_shutdown=5)
    Server(config).run(sockets=[sock])
