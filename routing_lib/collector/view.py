"""What the collector knows of the fleet, for the two answers that carry NameServer state:
RegisterBrokerResult (masterAddr, haServerAddr of a slave's live master) and
QUERY_DATA_VERSION's `changed` + the NameServer's DataVersion.

MemoryView: the collector's own record of the requests it has published (acknowledged by
Kafka), on its receive clock; a CHANNEL_CLOSED of a broker's last connection to this collector
forgets it, as the Java NameServer's onChannelDestroy does. SnapshotView: the lookup's latest
published snapshot (the Delta warehouse), falling back to memory until one is loaded. Both are
exactly as stale as their source (docs/brokers.md "How current the answers are").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from routing_lib.core.group_routes import MASTER_ID
from routing_lib.lookup.refresher import SnapshotHolder
from routing_lib.lookup.routes import RouteIndex
from schemas.route_event import DEFAULT_HEARTBEAT_TIMEOUT_MILLIS


class BrokerView(Protocol):
    def register_result(
        self, cluster: str, broker_name: str, broker_id: int, now: int
    ) -> dict[str, str]: ...


@dataclass
class _Broker:
    broker_name: str
    broker_id: int
    ha_server_addr: str | None
    data_version: dict[str, Any]
    timeout_ms: int
    last_contact: int
    channels: set[str]  # its connections to this collector that carried a request

    def live(self, now: int) -> bool:
        return self.last_contact + self.timeout_ms >= now


class MemoryView:
    """Updated only after Kafka acknowledged the event, so it never knows more than Kafka."""

    def __init__(self) -> None:
        self._brokers: dict[tuple[str, str], _Broker] = {}  # (cluster, addr)
        self._masters: dict[str, tuple[str, str]] = {}  # brokerName -> (cluster, addr)

    def apply(self, event: dict[str, Any]) -> None:
        key = (event["clusterName"], event["brokerAddr"])
        kind, now, channel = event["eventType"], event["eventTime"], event.get("channel")
        broker = self._brokers.get(key)
        if kind == "REGISTER":
            timeout = event.get("heartbeatTimeoutMillis") or DEFAULT_HEARTBEAT_TIMEOUT_MILLIS
            kept = broker.channels if broker is not None and broker.live(now) else set()
            self._brokers[key] = _Broker(
                event["brokerName"],
                event["brokerId"],
                event.get("haServerAddr"),
                event["dataVersion"],
                timeout,
                now,
                kept | ({channel} if channel else set()),
            )
            if event["brokerId"] == MASTER_ID:
                self._masters[event["brokerName"]] = key
        elif kind == "HEARTBEAT":
            if broker is not None and broker.live(now):
                broker.last_contact = now
                if channel:
                    broker.channels.add(channel)
        elif kind == "UNREGISTER":
            self._forget(key)
        elif kind == "CHANNEL_CLOSED" and broker is not None and channel in broker.channels:
            broker.channels.discard(channel)
            if not broker.channels:
                self._forget(key)

    def _forget(self, key: tuple[str, str]) -> None:
        broker = self._brokers.pop(key, None)
        if broker is not None and self._masters.get(broker.broker_name) == key:
            del self._masters[broker.broker_name]

    def register_result(
        self, cluster: str, broker_name: str, broker_id: int, now: int
    ) -> dict[str, str]:
        if broker_id == MASTER_ID:
            return {}  # RouteInfoManager fills the result for slaves only
        master = self._masters.get(broker_name)
        broker = self._brokers.get((cluster, master[1])) if master else None
        if master is None or broker is None or not broker.live(now):
            return {}
        out = {"masterAddr": master[1]}
        if broker.ha_server_addr is not None:
            out["haServerAddr"] = broker.ha_server_addr
        return out

    def data_version(self, cluster: str, addr: str, now: int) -> dict[str, Any] | None:
        """The DataVersion last registered by this live broker, or None."""
        broker = self._brokers.get((cluster, addr))
        return broker.data_version if broker is not None and broker.live(now) else None


class SnapshotView:
    """RegisterBrokerResult from the lookup's current snapshot (memory until one is loaded)."""

    def __init__(self, holder: SnapshotHolder, memory: MemoryView) -> None:
        self.holder = holder
        self.memory = memory
        self._index: RouteIndex | None = None
        self._live_ha: dict[tuple[str, str], str | None] = {}

    def register_result(
        self, cluster: str, broker_name: str, broker_id: int, now: int
    ) -> dict[str, str]:
        served = self.holder.current
        if served is None:
            return self.memory.register_result(cluster, broker_name, broker_id, now)
        if broker_id == MASTER_ID:
            return {}
        index = served.index
        if index is not self._index:  # once per snapshot
            self._live_ha = {
                (b["clusterName"], b["brokerAddr"]): b.get("haServerAddr")
                for b in index.live_brokers
            }
            self._index = index
        data = index.cluster_info["brokerAddrTable"].get(broker_name)
        master = data["brokerAddrs"].get(MASTER_ID) if data else None
        if master is None or (cluster, master) not in self._live_ha:
            return {}
        ha = self._live_ha[(cluster, master)]
        return {"masterAddr": master, **({"haServerAddr": ha} if ha is not None else {})}
