"""`routectl demo`'s refresh as a person reads it: one table, rendered by a pure function."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest

from routelake_dev.demo import Refresh, fetch_refresh, render, started_message
from tests.support.lookup_support import ServerThread, Warehouse, tables, wait_until

NOW = 1_764_000_060_000


def refresh(**overrides) -> Refresh:
    values = dict(
        clock="12:00:05",
        elapsed_s=35.4,
        now_ms=NOW,
        watermark=NOW - 12_300,
        clusters={
            "clusterAddrTable": {"cluster-1": ["broker-2"], "cluster-0": ["broker-1", "broker-0"]},
            "brokerAddrTable": {
                "broker-0": {
                    "cluster": "cluster-0",
                    "brokerName": "broker-0",
                    "brokerAddrs": {"1": "10.0.0.2:10911", "0": "10.0.0.1:10911"},
                },
                "broker-1": {
                    "cluster": "cluster-0",
                    "brokerName": "broker-1",
                    "brokerAddrs": {"2": "10.0.0.5:10911", "1": "10.0.0.4:10911"},
                },
                "broker-2": {
                    "cluster": "cluster-1",
                    "brokerName": "broker-2",
                    "brokerAddrs": {"0": "10.0.0.6:10911"},
                },
            },
        },
        live=[
            {"clusterName": "cluster-0", "brokerAddr": "10.0.0.1:10911"},
            {"clusterName": "cluster-0", "brokerAddr": "10.0.0.2:10911"},
            {"clusterName": "cluster-0", "brokerAddr": "10.0.0.4:10911"},
            {"clusterName": "cluster-1", "brokerAddr": "10.0.0.6:10911"},
        ],
        topic="Topic3",
        route={
            "queueDatas": [
                {"brokerName": "broker-0", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
                {"brokerName": "broker-2", "readQueueNums": 4, "writeQueueNums": 2, "perm": 4},
            ]
        },
    )
    values.update(overrides)
    return Refresh(**values)


def test_render_a_refresh():
    assert render(refresh()) == "\n".join(
        [
            "--- 12:00:05 (+35 s)  watermark lag 12.3 s  clusters 2  groups 3  live brokers 4/5",
            "cluster    group     master          slaves                          live",
            "cluster-0  broker-0  10.0.0.1:10911  10.0.0.2:10911                  2/2",
            "cluster-0  broker-1  -               10.0.0.4:10911, 10.0.0.5:10911  1/2",
            "cluster-1  broker-2  10.0.0.6:10911  -                               1/1",
            "route of Topic3: broker-0 r8/w8 perm 6, broker-2 r4/w2 perm 4",
        ]
    )


@pytest.mark.parametrize("watermark", [None, 0])  # 0: tables before the job's first batch
def test_render_before_a_watermark_and_without_topics(watermark):
    text = render(refresh(watermark=watermark, topic=None, route=None, clusters={}, live=[]))
    assert text == "\n".join(
        [
            "--- 12:00:05 (+35 s)  watermark lag -  clusters 0  groups 0  live brokers 0/0",
            "cluster  group  master  slaves  live",
        ]
    )


def test_the_start_names_the_console():
    message = started_message(9876, 8080)
    assert "127.0.0.1:9876" in message
    assert "route console: open http://127.0.0.1:8080/ in a browser" in message


def test_a_refresh_read_from_the_real_service(tmp_path, caplog):
    """What the demo reads from the lookup service's HTTP API renders as the table above: the
    hand-built tables of tests/support/lookup_support.py (ClusterA: broker-a with a master and a
    slave, broker-b; ClusterB: broker-c, slaves only; three live brokers). The service's start
    (as `routectl serve` logs it) names the console's URL."""
    Warehouse(tmp_path).publish(0, NOW - 2_000, tables())
    caplog.set_level(logging.INFO, logger="routelake.lookup")
    with ServerThread(tmp_path) as server:
        http = f"http://127.0.0.1:{server.service.http_port}"
        assert f"route console: {http}/" in caplog.messages
        wait_until(lambda: fetch_refresh(http, time.monotonic()) is not None)
        view = fetch_refresh(http, time.monotonic())
    assert view is not None and view.watermark == NOW - 2_000
    lines = render(replace(view, clock="12:00:05", elapsed_s=0, now_ms=NOW)).splitlines()
    assert lines[0] == (
        "--- 12:00:05 (+0 s)  watermark lag 2.0 s  clusters 2  groups 3  live brokers 3/6"
    )
    assert lines[1:] == [
        "cluster   group     master          slaves                                           live",
        "ClusterA  broker-a  10.0.0.1:10911  10.0.0.2:10911                                   1/2",
        "ClusterA  broker-b  10.0.1.1:10911  -                                                1/1",
        "ClusterB  broker-c  -               10.0.2.1:10911, 10.0.2.2:10911, 10.0.2.12:10911  1/3",
    ]  # no "Topic*" topic in these tables: no sample route
