"""TLS with the real RocketMQ 5.3.3 Java side: mqadmin (`-Dtls.enable=true`) against the lookup
in enforcing mode, and a real broker registering over TLS with the collector.

Java's TLS options are system properties (RocketMQ's TlsSystemConfig); the client here checks
the server's certificate against the test one (`tls.client.authServer`), and a plain mqadmin
shows what a client in the wrong mode meets. Two mqadmin JVMs run side by side, one broker."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from routelake_dev import mqadmin
from routing_lib.remoting.tls import ListenerTls, TlsMode, server_context
from tests.support.broker_modes_support import free_broker_port  # below the ephemeral ports
from tests.support.lookup_support import ServerThread, Warehouse, fixture_tables, wait_until
from tests.support.rocketmq_support import CollectorThread, broker, events, run_mqadmin_batch
from tests.support.tls_support import TlsFiles, make_tls_files
from tests.test_mqadmin import canonical, expected_route, ok_or_broker_stats


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    reason = mqadmin.missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"RocketMQ tools missing in CI: {reason}")
        pytest.skip(reason)
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def enforcing(files: TlsFiles) -> ListenerTls:
    return ListenerTls(TlsMode.ENFORCING, server_context(str(files.cert), str(files.key)))


def java_tls_client(files: TlsFiles) -> tuple[str, ...]:
    """A Java client that speaks TLS and trusts only the test certificate."""
    return (
        "-Dtls.enable=true",
        "-Dtls.test.mode.enable=false",
        "-Dtls.client.authServer=true",
        f"-Dtls.client.trustCertPath={files.cert}",
    )


def test_mqadmin_over_tls(tls_files: TlsFiles, tmp_path: Path) -> None:
    tables, until = fixture_tables()  # brokers on 127.x: clusterList's stats calls stay local
    Warehouse(tmp_path / "warehouse").publish(0, until, tables)
    with ServerThread(tmp_path / "warehouse", tls=enforcing(tls_files)) as server:
        wait_until(lambda: server.service.holder.current is not None)
        index = server.service.holder.current.index
        namesrv = f"127.0.0.1:{server.service.port}"
        with ThreadPoolExecutor(max_workers=2) as pool:
            secure = pool.submit(
                run_mqadmin_batch,
                [("topicRoute", "-t", "TBW102"), ("clusterList",)],
                namesrv=namesrv,
                home=tmp_path / "tls-client",
                jvm_opts=java_tls_client(tls_files),
            )
            plain = pool.submit(
                run_mqadmin_batch,
                [("topicRoute", "-t", "TBW102")],
                namesrv=namesrv,
                home=tmp_path / "plain-client",
            )
            (route, clusters), (refused,) = secure.result(), plain.result()
        rejected = dict(server.service.metrics.rejections)

    assert route.error is None, route.stderr[-2000:]
    assert canonical(mqadmin.parse_topic_route(route.stdout)) == expected_route(index, "TBW102")
    rows = mqadmin.parse_cluster_list(ok_or_broker_stats(clusters).stdout)
    assert {(r.broker_name, r.addr) for r in rows} == {
        (name, addr)
        for name, data in index.cluster_info["brokerAddrTable"].items()
        for addr in data["brokerAddrs"].values()
    }
    # The plain client gets no route: its connection is closed at its first request.
    assert refused.error is not None and refused.stdout.strip() == ""
    assert f"RemotingSendRequestException: send request to </{namesrv}> failed" in refused.stderr
    assert rejected.get(("remoting", "tls_required"), 0) >= 1
    assert ("remoting", "tls_handshake_failed") not in rejected


@pytest.mark.real_broker
@pytest.mark.kafka
def test_broker_registers_over_tls(
    tls_files: TlsFiles, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    """A 5.3.3 broker with `-Dtls.enable=true` whose only NameServer is an enforcing collector:
    its REGISTER_BROKER reaches Kafka, acknowledged, and nothing was refused."""
    port = free_broker_port()
    with CollectorThread(kafka_bootstrap, topic, tls=enforcing(tls_files)) as collector:
        process = broker(
            tmp_path / "broker",
            port,
            [f"127.0.0.1:{collector.port}"],
            cluster="TlsCluster",
            name="broker-tls",
            jvm_opts=("-Dtls.enable=true",),
        ).start()
        try:

            def registered() -> list[dict]:
                return [
                    e
                    for e in events(kafka_bootstrap, topic)
                    if e["eventType"] == "REGISTER" and e["brokerName"] == "broker-tls"
                ]

            try:
                wait_until(lambda: registered() or not process.alive(), timeout=90)
            except AssertionError:
                pytest.fail(f"no REGISTER within 90 s; broker output:\n{process.output()}")
            assert process.alive(), process.output()
            [first, *_] = registered()
            assert first["brokerAddr"] == f"127.0.0.1:{port}"
            assert first["clusterName"] == "TlsCluster"
            metrics = collector.server.metrics
            assert not metrics.rejections, dict(metrics.rejections)
            assert metrics.connections >= 1  # the broker's TLS connection, kept open
        finally:
            process.stop()
