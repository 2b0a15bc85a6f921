"""Check a running lookup service against a warehouse's canonical dump (TCP and HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from routing_lib.remoting.frames import SerializeType
from routing_lib.remoting.protocol import RequestCode, ResponseCode
from tests.support.lookup_support import RemotingClient, ServerThread, wait_until


def _expected_route(dump: dict, topic: str) -> tuple[list, list] | None:
    queues = dump["topicQueueTable"][topic]
    brokers = [dump["brokerAddrTable"][n] for n in sorted(queues) if n in dump["brokerAddrTable"]]
    if not brokers:
        return None
    return (
        [queues[n] for n in sorted(queues)],
        [(b["cluster"], b["brokerName"], b["brokerAddrs"]) for b in brokers],
    )


def _actual(route: dict) -> tuple[list, list]:
    queues = sorted(route["queueDatas"], key=lambda q: q["brokerName"])
    brokers = sorted(route["brokerDatas"], key=lambda b: b["brokerName"])
    return (
        queues,
        [
            (b["cluster"], b["brokerName"], {str(k): v for k, v in b["brokerAddrs"].items()})
            for b in brokers
        ],
    )


def assert_lookup_matches_dump(warehouse: Path, dump: dict) -> None:
    """Every topic of the dump, over the remoting protocol (both header serialisations) and
    HTTP, answers the dump's queue and broker data (or TOPIC_NOT_EXIST when it has no route)."""
    with ServerThread(warehouse, port=0, http_port=0) as server:
        http = httpx.Client(base_url=f"http://127.0.0.1:{server.service.http_port}")
        wait_until(lambda: http.get("/readyz").status_code == 200, timeout=30)
        tcp = RemotingClient(server.service.port)
        try:
            for i, topic in enumerate(sorted(dump["topicQueueTable"])):
                expected = _expected_route(dump, topic)
                kind = SerializeType.JSON if i % 2 else SerializeType.ROCKETMQ
                response = tcp.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, kind, topic=topic)
                answer = http.get(f"/topics/{topic}/route")
                if expected is None:
                    assert response.code == ResponseCode.TOPIC_NOT_EXIST, topic
                    assert answer.status_code == 404, topic
                    continue
                assert response.code == ResponseCode.SUCCESS, topic
                assert _actual(json.loads(response.body)) == expected, topic
                assert _actual(answer.json()["data"]) == expected, topic
        finally:
            tcp.close()
            http.close()
