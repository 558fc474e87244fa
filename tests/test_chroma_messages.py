"""What a store on a Chroma server says when the URL is wrong (issue 36), without a Chroma server:
stand-ins on a local port. A URL of another HTTP service is one StoreError naming the URL and the
fix (it was `Internal error: ValueError:` and the service's HTML page); a hung server's message
names the limit that ran out (it said "within 120 s" after 10 s)."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("chromadb")

from kbtool.errors import StoreError  # noqa: E402
from kbtool.store import chroma_server  # noqa: E402
from kbtool.store.chroma_server import connect, server_record  # noqa: E402

from .conftest import stand_in_http  # noqa: E402

NGINX = (b"<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n</head>\n<body>\n"
         b"<h1>Welcome to nginx!</h1>\n<p>If you see this page, the nginx web server is working.</p>\n</body>\n</html>\n")


@pytest.mark.parametrize("status, body, ctype, words", [
    (200, NGINX, "text/html", "HTTP 200, text/html, an HTML page"),
    (404, NGINX, "text/html", "HTTP 404, text/html, an HTML page"),
    (502, NGINX, "text/html", "HTTP 502, text/html, an HTML page"),
    (200, b'{"status": "ok"}', "application/json", "HTTP 200, application/json"),
    (404, b'{"detail": "Not Found"}', "application/json", "HTTP 404"),  # a Chroma 0.x: no v2 API
])
def test_a_url_of_another_http_service_is_one_line_naming_it(status, body, ctype, words):
    httpd, url = stand_in_http(status, body, ctype)
    try:
        with pytest.raises(StoreError) as e:
            connect(server_record(url))
    finally:
        httpd.shutdown()
    msg = str(e.value)
    assert "\n" not in msg and "<" not in msg and "nginx" not in msg, msg
    assert msg.startswith(f"{url} answers, but not as a Chroma server") and words in msg, msg
    assert "chroma run --path DIR" in msg and "kbtool status" in msg


def test_a_refusing_server_is_left_to_the_client_to_name():
    """401 on the heartbeat is not 'not Chroma': the client's next request says access was refused."""
    httpd, url = stand_in_http(401, json.dumps({"error": "AuthorizationError", "message": "Unauthorized"}).encode(),
                        "application/json")
    try:
        with pytest.raises(StoreError, match="refused access"):
            connect(server_record(url))
    finally:
        httpd.shutdown()


def test_a_hung_server_names_the_limit_that_ran_out(monkeypatch):
    """The heartbeat waits min(10 s, $KBTOOL_CHROMA_TIMEOUT): the message said the 120 s default."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # accepted by the kernel, never answered
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        monkeypatch.delenv("KBTOOL_CHROMA_TIMEOUT", raising=False)
        monkeypatch.setattr(chroma_server, "CONNECT_TIMEOUT", 0.5)  # the 10 s, shortened
        t = time.monotonic()
        with pytest.raises(StoreError) as e:
            connect(server_record(url))
        assert time.monotonic() - t < 5
        msg = str(e.value)
        assert "did not answer a heartbeat within 0.5 s" in msg and "120" not in msg and url in msg, msg
        monkeypatch.setenv("KBTOOL_CHROMA_TIMEOUT", "0.3")  # below the connect limit: it is the one that applies
        with pytest.raises(StoreError) as e:
            connect(server_record(url))
        assert "within 0.3 s" in str(e.value) and "raise $KBTOOL_CHROMA_TIMEOUT (now 0.3 s)" in str(e.value)
    finally:
        sock.close()
