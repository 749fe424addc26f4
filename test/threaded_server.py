"""A fake HTTP server's lifetime in a test: served on a daemon thread, shut down afterwards."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Iterator, TypeVar

Server = TypeVar("Server", bound=HTTPServer)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class JSONHandler(BaseHTTPRequestHandler):
    """A stand-in server's handler: quiet, and replying JSON."""

    def log_message(self, *args: object) -> None:
        pass

    def reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
