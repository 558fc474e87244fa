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


def run_uvicorn(app, sock, log_level: str = "info", *, lifespan: str = "off") -> None:
    """uvicorn on ``sock`` until Ctrl-C or SIGTERM, which stop it gracefully: the process then exits 0
    (uvicorn re-raises the signal after shutting down). Every log line goes to stderr."""
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
    config = uvicorn.Config(app, log_level=log_level, log_config=logs, access_log=log_level in ("info", "debug"),
                            lifespan=lifespan, timeout_graceful_shutdown=5)
    Server(config).run(sockets=[sock])
