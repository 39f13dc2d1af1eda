"""Network helpers for tests: a free TCP port for a server a test starts (a trainer's rendezvous,
a stack's trainer port), and files served over HTTP as a publisher serves them."""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def free_port() -> int:
    """A port free on the loopback of the calling thread's network namespace (inside a test of the
    test sshd, the nodes' namespace)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(directory: Path) -> Iterator[str]:
    """The files of `directory` over HTTP on loopback, as a publisher serves them: the base URL."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
