"""A local HTTPS server that records the requests it gets, standing in for nothing but a TLS peer.

It answers every request 200 with an empty JSON object (or what `replies` holds for the path) and
keeps what it received (method, path, headers, body), so a test can hold the request a trainer
or the program builds to the Kubernetes API's rules.
It is not the Kubernetes API: no authentication, authorization or object is checked here.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Received:
    client: str  # the address the request came from
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    port: int
    ca_file: Path
    requests: list[Received] = field(default_factory=list)
    status: int = 200
    # Answers by path, (status, JSON body), instead of `status` and an empty object.
    replies: dict[str, tuple[int, object]] = field(default_factory=dict)
    # Answers by path written as they are, then the connection closed: a reply cut short.
    raw: dict[str, bytes] = field(default_factory=dict)
    # Called with each request as it arrives, before the answer: what the client side holds then.
    on_request: Callable[[Received], None] | None = None


def self_signed(folder: Path, address: str = "127.0.0.1") -> tuple[Path, Path]:
    """A certificate for `address` and its key; the certificate is its own CA."""
    cert, key = folder / "ca.crt", folder / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={address}",
         "-addext", f"subjectAltName=IP:{address}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def recording_server(folder: Path, address: str = "127.0.0.1") -> Iterator[Recorder]:
    cert, key = self_signed(folder, address)
    recorder: Recorder

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            received = Received(
                self.client_address[0], self.command, self.path, dict(self.headers.items()), body
            )
            recorder.requests.append(received)
            if recorder.on_request is not None:
                recorder.on_request(received)
            if self.path in recorder.raw:
                self.wfile.write(recorder.raw[self.path])
                self.close_connection = True
                return
            status, body = recorder.replies.get(self.path, (recorder.status, {}))
            reply = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_PATCH = do_POST = do_PUT = _record

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    recorder = Recorder(server.server_address[1], cert)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


# The service account token a pretend pod holds: what a request must carry, and no output may show.
TOKEN = "test-token-not-a-secret"


def service_account(folder: Path, ca_file: Path, namespace: str = "k8scifar") -> Path:
    """A pod's service account folder (token, namespace, the API server's CA) under `folder`."""
    account = folder / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN + "\n")
    (account / "namespace").write_text(namespace)
    (account / "ca.crt").write_bytes(ca_file.read_bytes())
    return account


def kubeconfig(server: Recorder, folder: Path) -> str:
    """A kubeconfig like the lab's (one cluster, user and context; a client certificate) for `server`."""
    client_cert, client_key = self_signed(folder / "client")
    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": f"https://127.0.0.1:{server.port}",
                    "certificate-authority-data": base64.b64encode(server.ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [
            {
                "name": "lab",
                "user": {
                    "client-certificate-data": base64.b64encode(client_cert.read_bytes()).decode(),
                    "client-key-data": base64.b64encode(client_key.read_bytes()).decode(),
                },
            }
        ],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
        "current-context": "lab",
    }
    return yaml.safe_dump(data)
