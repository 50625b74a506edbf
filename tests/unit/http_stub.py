"""A stand-in HTTP server for tests: a handler class served on a free local port in a thread."""

from __future__ import annotations

import contextlib
import http.server
import threading
from typing import Iterator


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that writes no access log into the test's output."""

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler], threaded: bool = False) -> Iterator[str]:
    """Serve `handler` until the block ends (`threaded`: each request in a thread of its own, for a
    handler that itself waits on another server): its base URL."""
    server_class = http.server.ThreadingHTTPServer if threaded else http.server.HTTPServer
    httpd = server_class(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
