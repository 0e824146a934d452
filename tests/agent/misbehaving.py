"""A local HTTP endpoint that answers every POST with scripted raw bytes (for endpoint-failure tests)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from reasearch.models.testing import LocalHTTPServer

TRUNCATED = b'{"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "te'
WRONG_SHAPE = b'{"hello": "world", "content": 7, "choices": "none"}'
HTML = (b"<html><head><title>502 Bad Gateway</title></head>\n<body><center><h1>Bad Gateway</h1></center>\n"
        b"<hr><center>nginx</center></body></html>\n")
BODIES = {"truncated": (TRUNCATED, "application/json"), "wrong_shape": (WRONG_SHAPE, "application/json"),
          "html": (HTML, "text/html")}


class RawServer(LocalHTTPServer):
    """Answers every POST (any path) with the next scripted ``(status, content_type, body)``; the last
    item repeats. ``requests`` counts the POSTs received."""

    def __init__(self, answers: list[tuple[int, str, bytes]]) -> None:
        self.answers = list(answers)
        self.requests = 0
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests += 1
                server.paths.append(self.path)
                status, ctype, body = server.answers[0] if len(server.answers) == 1 else server.answers.pop(0)
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


def always(kind: str) -> RawServer:
    body, ctype = BODIES[kind]
    return RawServer([(200, ctype, body)])


class CutServer(RawServer):
    """Announces a longer body than it sends, then closes the connection (a proxy that died mid-reply)."""

    def __init__(self) -> None:
        super().__init__([(200, "application/json", b"")])
        server = self

        class Handler(self._httpd.RequestHandlerClass):  # type: ignore[name-defined,misc]
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests += 1
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "5000")
                self.end_headers()
                self.wfile.write(b'{"content": [{"type": "text", "text": "cut')
                self.wfile.flush()
                self.close_connection = True

        self._httpd.RequestHandlerClass = Handler
