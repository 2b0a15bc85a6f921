"""The connections brokers' requests arrive on (contract §2, "Connections (channels)").

RocketMQ's NameServer removes a broker at once when the connection of its registration closes,
fails or stays idle (BrokerHousekeepingService -> RouteInfoManager.onChannelDestroy). The
collector names each connection `COLLECTOR@INCARNATION#N` (its id, its start time in epoch ms,
the listener's number of the connection), puts that name on every REGISTER and HEARTBEAT it
publishes, remembers which broker addresses sent one on each connection, and when the
connection ends hands back one CHANNEL_CLOSED event per address. The job removes a broker once
every connection it used has closed. A connection the collector closes itself, because it is
stopping, yields none: the broker did not go away, and a restarted collector's later
incarnation retires its old connections in the job's state without removing anyone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from routing_lib.remoting.listener import Connection, ConnectionEnd
from schemas.route_event import parse_channel

CHANNEL_EVENT_TYPES = frozenset({"REGISTER", "HEARTBEAT"})  # the requests that name a channel
CLOSED = "CHANNEL_CLOSED"
_IDENTITY_FIELDS = ("clusterName", "brokerAddr", "brokerName", "brokerId")


@dataclass
class _Carried:
    """What one connection carried: the latest identity of each broker (cluster, address)
    that sent a REGISTER or HEARTBEAT on it, and the latest eventTime stamped on it."""

    channel: str
    brokers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    latest_event_time: int = 0


ClosedHandler = Callable[[list[dict[str, Any]], ConnectionEnd], None]


class BrokerChannels:
    """Channel names for the connections of one collector incarnation, and the CHANNEL_CLOSED
    events of those that carried a broker's REGISTER or HEARTBEAT, handed to `on_closed`."""

    def __init__(
        self,
        collector_id: str,
        incarnation: int,
        clock: Callable[[], int],
        on_closed: ClosedHandler,
    ) -> None:
        """ValueError when `collector_id` cannot name a channel (1-128 characters without
        '@', '#' or whitespace): every event it stamped would be dead-lettered."""
        try:
            parse_channel(f"{collector_id}@{incarnation}#0")
        except ValueError as exc:
            raise ValueError(
                f"collector id {collector_id!r} cannot name a channel: {exc}"
            ) from None
        self.collector_id = collector_id
        self.incarnation = incarnation
        self.clock = clock
        self.on_closed = on_closed
        self._open: dict[Connection, _Carried] = {}

    def channel_name(self, connection: Connection) -> str:
        return f"{self.collector_id}@{self.incarnation}#{connection.number}"

    def stamp(self, connection: Connection | None, event: dict[str, Any]) -> None:
        """Put the connection's name on a REGISTER or HEARTBEAT and remember its broker (other
        events, and requests answered outside a listener, are left as they are)."""
        if connection is None or event["eventType"] not in CHANNEL_EVENT_TYPES:
            return
        carried = self._open.get(connection)
        if carried is None:
            carried = self._open[connection] = _Carried(self.channel_name(connection))
            connection.when_ended(lambda end: self._ended(connection, end))
        event["channel"] = carried.channel
        address = (event["clusterName"], event["brokerAddr"])
        carried.brokers[address] = {name: event[name] for name in _IDENTITY_FIELDS}
        carried.latest_event_time = max(carried.latest_event_time, event["eventTime"])

    @property
    def open_connections(self) -> int:
        """Connections that carried a broker's request and have not ended."""
        return len(self._open)

    def _ended(self, connection: Connection, end: ConnectionEnd) -> None:
        carried = self._open.pop(connection)
        if end is ConnectionEnd.STOPPING:
            return
        self.on_closed(self._closed_events(carried), end)

    def _closed_events(self, carried: _Carried) -> list[dict[str, Any]]:
        # Never before a request of the connection (a clock step back): ordered by
        # (eventTime, arrival), the close then comes after them.
        event_time = max(self.clock(), carried.latest_event_time)
        return [
            {"eventType": CLOSED, "eventTime": event_time, **broker, "channel": carried.channel}
            for broker in carried.brokers.values()
        ]
