"""A fake HTTP server's lifetime in a test: served on a daemon thread, shut down afterwards."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import HTTPServer
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
