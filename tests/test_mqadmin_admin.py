"""Operators' mqadmin commands (RocketMQ 5.3.3 tools from .jars/rocketmq) against `serve
--collect` over fixture 16's warehouse: writes become contract events in the real local Kafka,
and the KV reads (updateOrderConf -m get, getNamesrvConfig) answer from the served snapshot."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from routelake_dev import mqadmin
from routing_lib.collector.publisher import KafkaPublisher
from routing_lib.collector.service import Collector
from routing_lib.lookup import namesrv_config
from tests.support.lookup_support import (
    KV_TABLES,
    KV_WATERMARK,
    ServerThread,
    Warehouse,
    wait_until,
)
from tests.support.rocketmq_support import events, run_mqadmin_batch


@pytest.fixture
def tools():
    reason = mqadmin.missing_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"RocketMQ tools missing in CI: {reason}")
        pytest.skip(reason)


def test_mqadmin_admin_commands(tools, tmp_path, kafka_bootstrap, topic):
    Warehouse(tmp_path / "wh").publish(0, KV_WATERMARK, KV_TABLES)
    collector = Collector(
        KafkaPublisher(kafka_bootstrap, topic),
        collector_id="mqadmin-test",
        tick_interval_ms=3_600_000,
    )
    commands = {
        "put_kv": ("updateKvConfig", "-s", "team", "-k", "oncall", "-v", "alice"),
        "delete_kv": ("deleteKvConfig", "-s", "team", "-k", "pager"),
        "put_order": ("updateOrderConf", "-m", "put", "-t", "Payments", "-v", "broker-a:2"),
        "get_order": ("updateOrderConf", "-m", "get", "-t", "Orders"),
        "wipe": ("wipeWritePerm", "-b", "broker-a"),
        "add": ("addWritePerm", "-b", "broker-b"),
        "delete_order": ("updateOrderConf", "-m", "delete", "-t", "Gone"),
    }
    with ServerThread(tmp_path / "wh", collector=collector, order_message_enable=True) as server:
        wait_until(lambda: server.service.holder.current is not None)
        namesrv = f"127.0.0.1:{server.service.port}"

        def run(name: str) -> mqadmin.MQAdminResult:
            return mqadmin.run_mqadmin(
                *commands[name], namesrv=namesrv, timeout=45, home=tmp_path / name
            )

        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            results = dict(zip(commands, pool.map(run, commands), strict=True))
        # the name server's settings: three commands in one JVM
        update, refused, shown = run_mqadmin_batch(
            [
                ("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false"),
                ("updateNamesrvConfig", "-k", "listenPort", "-v", "1"),
                ("getNamesrvConfig",),
            ],
            namesrv=namesrv,
            home=tmp_path / "config",
        )
    for name, result in results.items():
        assert result.error is None, (name, result.stdout, result.stderr)
    # A read from the snapshot (no job applied the puts): fixture 16's value.
    assert "topic=[Orders], orderConf=[broker-a:4]" in results["get_order"].stdout
    # wipeTopicCount from the snapshot: broker-a holds 3 topics in fixture 16.
    assert (
        f"wipe write perm of broker[broker-a] in name server[{namesrv}] OK, 3"
        in results["wipe"].stdout
    )
    published = {
        (e["eventType"], e.get("namespace"), e.get("key"), e.get("value"), e.get("brokerName"))
        for e in events(kafka_bootstrap, topic)
    }
    assert published == {
        ("PUT_KV", "team", "oncall", "alice", None),
        ("DELETE_KV", "team", "pager", None, None),
        ("PUT_KV", "ORDER_TOPIC_CONFIG", "Payments", "broker-a:2", None),
        ("WIPE_WRITE_PERM", None, None, None, "broker-a"),
        ("ADD_WRITE_PERM", None, None, None, "broker-b"),
        ("DELETE_KV", "ORDER_TOPIC_CONFIG", "Gone", None, None),
        ("PUT_KV", namesrv_config.NAMESPACE, "orderMessageEnable", "false", None),
    }
    assert "OK" in results["add"].stdout
    assert update.error is None and "update name server config success!" in update.stdout
    assert refused.code == 29 and "listenPort cannot be changed here" in refused.remark
    # read from the snapshot, which runs with orderMessageEnable: the update is not applied
    # until the job publishes its PUT_KV
    settings = dict(
        (key.strip(), value)
        for key, value in (
            line.split("=  ", 1) for line in shown.stdout.splitlines() if "=  " in line
        )
    )
    assert settings["orderMessageEnable"] == "true" and settings["enableTopicList"] == "true"
    assert all(e["requestedBy"].startswith("127.0.0.1:") for e in events(kafka_bootstrap, topic))
