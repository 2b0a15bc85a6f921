"""TLS on the lookup's listeners (remoting and HTTP) in RocketMQ's three modes, with Python's
own TLS clients; the real Java client and broker are in test_tls_rocketmq.py."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from routing_lib import cli
from routing_lib.config import load_config
from routing_lib.remoting.frames import FrameDecoder, RemotingCommand, encode
from routing_lib.remoting.protocol import NAMESRV_VERSION, RequestCode, ResponseCode
from routing_lib.remoting.tls import (
    PLAIN,
    ClientAuth,
    ListenerTls,
    TlsMode,
    listener_tls,
    server_context,
)
from tests.support.lookup_support import ServerThread, Warehouse, tables, wait_until
from tests.support.rocketmq_support import exchange, exchange_bytes
from tests.support.tls_support import (
    KEY_PASSWORD,
    TlsFiles,
    client_context,
    make_tls_files,
    tls_exchange,
)

ROUTE = RemotingCommand(
    code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
    version=NAMESRV_VERSION,
    opaque=7,
    ext_fields={"topic": "TBW102"},
)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("warehouse")
    Warehouse(root).publish(0, 1_764_000_000_000, tables())
    return root


@contextlib.contextmanager
def lookup(
    warehouse: Path, tls: ListenerTls, http_tls: ListenerTls | None = None
) -> Iterator[ServerThread]:
    """A lookup with these listeners, once it serves its first snapshot."""
    with ServerThread(warehouse, tls=tls, http_tls=tls if http_tls is None else http_tls) as server:
        wait_until(lambda: server.service.holder.current is not None)
        yield server


@pytest.fixture(scope="module")
def served_plain(warehouse: Path) -> Iterator[tuple[ServerThread, bytes]]:
    """A plain lookup and its answer to ROUTE: what every TLS answer must equal."""
    with lookup(warehouse, PLAIN) as server:
        answers, _ = exchange(server.service.port, ROUTE)
        assert answers[0].code == ResponseCode.SUCCESS
        yield server, answers[0].body


def rejections(server: ServerThread) -> dict[tuple[str, str], int]:
    return dict(server.service.metrics.rejections)


def test_enforcing_serves_tls_and_refuses_plain(
    warehouse: Path, tls_files: TlsFiles, served_plain, caplog: pytest.LogCaptureFixture
) -> None:
    _, expected = served_plain
    tls = ListenerTls(TlsMode.ENFORCING, server_context(str(tls_files.cert), str(tls_files.key)))
    with lookup(warehouse, tls) as server:
        port, http_port = server.service.port, server.service.http_port
        [answer] = tls_exchange(port, client_context(tls_files), ROUTE)
        assert (answer.code, answer.opaque, answer.body) == (ResponseCode.SUCCESS, 7, expected)

        with caplog.at_level(logging.WARNING, logger="routelake.lookup"):
            answers, closed = exchange(port, ROUTE)
        assert (answers, closed) == ([], True)
        assert rejections(server) == {("remoting", "tls_required"): 1}
        assert "tls_required (a plain (non-TLS) client; [tls] mode is enforcing)" in caplog.text

        with httpx.Client(verify=client_context(tls_files)) as client:
            reply = client.get(f"https://127.0.0.1:{http_port}/topics/TBW102/route")
            assert reply.status_code == 200
            metrics = client.get(f"https://localhost:{http_port}/metrics").text
        assert 'reason="tls_required"' in metrics
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{http_port}/healthz")
        wait_until(lambda: rejections(server).get(("http", "tls_required")) == 1)


def test_permissive_serves_tls_and_plain_on_one_port(
    warehouse: Path, tls_files: TlsFiles, served_plain
) -> None:
    _, expected = served_plain
    tls = ListenerTls(TlsMode.PERMISSIVE, server_context(str(tls_files.cert), str(tls_files.key)))
    with lookup(warehouse, tls) as server:
        port, http_port = server.service.port, server.service.http_port
        answers, _ = exchange(port, ROUTE, dataclasses.replace(ROUTE, opaque=8))
        assert [(a.code, a.opaque, a.body) for a in answers] == [(0, 7, expected), (0, 8, expected)]
        for _ in range(2):  # a connection each: sorting is per connection
            [answer] = tls_exchange(port, client_context(tls_files), ROUTE)
            assert answer.body == expected
        plain = httpx.get(f"http://127.0.0.1:{http_port}/topics/TBW102/route")
        secure = httpx.get(
            f"https://127.0.0.1:{http_port}/topics/TBW102/route", verify=client_context(tls_files)
        )
        assert plain.status_code == secure.status_code == 200
        assert plain.content == secure.content
        assert rejections(server) == {}


def test_permissive_answers_a_plain_client_that_waits_before_sending(
    warehouse: Path, tls_files: TlsFiles
) -> None:
    """A connection is sorted by its first byte, whenever that comes (a client may connect
    early, as connection pools do); a client that leaves before sending is no error."""
    tls = ListenerTls(TlsMode.PERMISSIVE, server_context(str(tls_files.cert), str(tls_files.key)))
    with lookup(warehouse, tls) as server:
        port = server.service.port
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # a port probe
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            time.sleep(0.5)  # connected, silent: waiting to be sorted
            sock.sendall(encode(ROUTE))
            decoder, answers = FrameDecoder(), []
            while not answers:
                answers = decoder.feed(sock.recv(65536))
        assert answers[0].code == ResponseCode.SUCCESS
        assert rejections(server) == {}


def test_disabled_names_a_tls_client_in_the_log(
    warehouse: Path, tls_files: TlsFiles, served_plain, caplog: pytest.LogCaptureFixture
) -> None:
    """The default: plain only. A TLS client's handshake would read as a 350 MB frame; it is
    refused as what it is."""
    server, _ = served_plain
    before = rejections(server).get(("remoting", "tls_not_enabled"), 0)
    with caplog.at_level(logging.WARNING, logger="routelake.lookup"):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls_exchange(server.service.port, client_context(tls_files), ROUTE)
    assert rejections(server)[("remoting", "tls_not_enabled")] == before + 1
    assert "tls_not_enabled (a TLS client; [tls] mode is disabled)" in caplog.text
    answers, _ = exchange(server.service.port, ROUTE)
    assert answers[0].code == ResponseCode.SUCCESS


def test_a_client_that_distrusts_the_certificate_is_counted(
    warehouse: Path, tls_files: TlsFiles
) -> None:
    tls = ListenerTls(TlsMode.ENFORCING, server_context(str(tls_files.cert), str(tls_files.key)))
    with lookup(warehouse, tls) as server:
        with pytest.raises(ssl.SSLCertVerificationError):
            tls_exchange(server.service.port, ssl.create_default_context(), ROUTE)
        wait_until(lambda: rejections(server) == {("remoting", "tls_handshake_failed"): 1})
        # a handshake cut short
        answers, closed = exchange_bytes(server.service.port, b"\x16\x03\x01", timeout=30)
        assert (answers, closed) == ([], True)
        wait_until(lambda: rejections(server) == {("remoting", "tls_handshake_failed"): 2})


def test_client_certificates_required(warehouse: Path, tls_files: TlsFiles, served_plain) -> None:
    _, expected = served_plain
    context = server_context(
        str(tls_files.cert),
        str(tls_files.encrypted_key),
        key_password=KEY_PASSWORD,
        client_auth=ClientAuth.REQUIRE,
        trust_cert_path=str(tls_files.client_cert),
    )
    with lookup(warehouse, ListenerTls(TlsMode.ENFORCING, context)) as server:
        port = server.service.port
        [answer] = tls_exchange(port, client_context(tls_files, with_client_cert=True), ROUTE)
        assert answer.body == expected
        try:  # TLS 1.3: the refusal comes after the client's side of the handshake
            answers = tls_exchange(port, client_context(tls_files), ROUTE)
        except (ssl.SSLError, ConnectionError):
            answers = []
        assert answers == []
        wait_until(lambda: rejections(server) == {("remoting", "tls_handshake_failed"): 1})


def test_http_mode_apart_from_the_remoting_mode(warehouse: Path, tls_files: TlsFiles) -> None:
    config = load_config().tls
    remoting, http = listener_tls(
        dataclasses.replace(
            config,
            mode="permissive",
            http_mode="enforcing",
            cert_path=str(tls_files.cert),
            key_path=str(tls_files.key),
        )
    )
    assert (remoting.mode, http.mode) == (TlsMode.PERMISSIVE, TlsMode.ENFORCING)
    assert remoting.context is http.context
    with lookup(warehouse, remoting, http) as server:
        assert exchange(server.service.port, ROUTE)[0][0].code == ResponseCode.SUCCESS
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{server.service.http_port}/healthz")


def test_config_default_is_disabled_and_errors_name_the_key(
    tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config().tls
    assert (config.mode, config.http_mode) == ("disabled", "")
    assert listener_tls(config) == (PLAIN, PLAIN)
    with pytest.raises(ValueError, match=r"\[tls\] mode = 'strict': expected disabled \|"):
        listener_tls(dataclasses.replace(config, mode="strict"))
    with pytest.raises(ValueError, match="needs cert_path and key_path"):
        listener_tls(dataclasses.replace(config, http_mode="enforcing"))
    wrong_password = dataclasses.replace(
        config,
        mode="enforcing",
        cert_path=str(tls_files.cert),
        key_path=str(tls_files.encrypted_key),
        key_password="wrong",
    )
    with pytest.raises(ValueError, match=r"\[tls\] cannot load cert_path"):
        listener_tls(wrong_password)
    with pytest.raises(ValueError, match="needs trust_cert_path"):
        listener_tls(
            dataclasses.replace(wrong_password, key_password=KEY_PASSWORD, client_auth="require")
        )
    monkeypatch.setenv("ROUTELAKE_TLS_MODE", "permissive")
    assert load_config().tls.mode == "permissive"


def test_routectl_flags_override_the_config(
    tls_files: TlsFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--tls-mode", "enforcing", "--tls-cert", str(tls_files.cert)]
    args = cli.build_parser().parse_args(["collect", *flags, "--tls-key", str(tls_files.key)])
    remoting, http = cli.listeners.listener_tls(args, load_config())
    assert (remoting.mode, http.mode) == (TlsMode.ENFORCING, TlsMode.ENFORCING)
    # a key that does not fit: refused before anything listens, with the key's name
    assert cli.main(["serve", *flags, "--tls-key", str(tls_files.client_key)]) == 2
    assert "routectl serve: [tls] cannot load cert_path" in capsys.readouterr().err
