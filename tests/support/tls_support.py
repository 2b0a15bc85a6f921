"""Test certificates (made with the `openssl` command line, as an operator would) and TLS
clients for routelake's listeners."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from routing_lib.remoting.frames import FrameDecoder, RemotingCommand, encode

KEY_PASSWORD = "routelake-test"


@dataclass(frozen=True)
class TlsFiles:
    cert: Path  # self-signed server certificate for 127.0.0.1 and localhost
    key: Path  # its key, unencrypted
    encrypted_key: Path  # the same key encrypted with KEY_PASSWORD
    client_cert: Path  # a self-signed client certificate (its own trust anchor)
    client_key: Path


def _self_signed(folder: Path, name: str, subject: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={subject}",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def make_tls_files(folder: Path) -> TlsFiles:
    """Server and client certificates in `folder` (about 0.2 s of openssl)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    cert, key = _self_signed(folder, "server", "routelake-test-server")
    encrypted = folder / "server-key-encrypted.pem"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-aes256", "-passout", f"pass:{KEY_PASSWORD}"]
        + ["-out", str(encrypted)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    client_cert, client_key = _self_signed(folder, "client", "routelake-test-client")
    return TlsFiles(cert, key, encrypted, client_cert, client_key)


def client_context(files: TlsFiles, *, with_client_cert: bool = False) -> ssl.SSLContext:
    """A client that verifies the server against the test certificate."""
    context = ssl.create_default_context(cafile=str(files.cert))
    if with_client_cert:
        context.load_cert_chain(files.client_cert, files.client_key)
    return context


def tls_exchange(
    port: int, context: ssl.SSLContext, *requests: RemotingCommand, timeout: float = 10.0
) -> list[RemotingCommand]:
    """Send requests over TLS on one connection, read their answers (one per request)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(b"".join(encode(r) for r in requests))
            decoder, answers = FrameDecoder(), []
            while len(answers) < len(requests):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answers += decoder.feed(chunk)
            return answers
