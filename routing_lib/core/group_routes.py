"""One broker group's slice of the NameServer's five route tables, and its transitions.

This mirrors RocketMQ 5.x `RouteInfoManager` (registerBroker, unRegisterBroker,
scanNotActiveBroker/onChannelDestroy) restricted to one brokerName. The fleet's tables are the
union of every group's slice; that is exact as long as a broker address belongs to one group,
which is how RocketMQ fleets are deployed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import compress
from operator import attrgetter
from typing import ClassVar, NamedTuple, TypeVar

from routing_lib.core.overlay import EMPTY_GROUP_TOPICS, GroupTopics, Overlay, PermOp
from routing_lib.core.topic_table import EMPTY_TOPICS, AppliedRegistration, QueueData, TopicTable
from routing_lib.core.wire import Event, LazyTopicTable, TopicRow, topic_names
from schemas.route_event import (
    DEFAULT_HEARTBEAT_TIMEOUT_MILLIS,
    ChannelClosedEvent,
    ChannelId,
    DeleteKvEvent,
    DeleteTopicEvent,
    HeartbeatEvent,
    PutKvEvent,
    RegisterEvent,
    TopicConfig,
    UnregisterEvent,
    WritePermEvent,
    parse_channel,
)

# a topic config's name and its QueueData fields, read in C (a TopicRow or a pydantic config)
_TOPIC_NAME = attrgetter("topicName")
_QUEUE_DATA = attrgetter("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")

MASTER_ID = 0
PERM_WRITE = 0x2
PERM_READ = 0x4

BrokerKey = tuple[str, str]  # (clusterName, brokerAddr): RocketMQ's BrokerAddrInfo
# a registration's topic config: decoded from its packed form, or a validated model
TopicConfigLike = TopicRow | TopicConfig
_Memo = TypeVar("_Memo", bound=tuple[object, ...])


@dataclass(frozen=True)
class DataVersion:
    """RocketMQ's DataVersion of a live broker, as the state machine holds it (the event's
    validated form is schemas.route_event.EventDataVersion)."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0


@dataclass(frozen=True)
class BrokerLive:
    last_update_timestamp: int
    heartbeat_timeout_millis: int
    data_version: DataVersion
    ha_server_addr: str | None

    @property
    def deadline(self) -> int:
        """The broker expires at any time strictly after this."""
        return self.last_update_timestamp + self.heartbeat_timeout_millis


@dataclass
class BrokerData:
    cluster: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool = False
    zone_name: str | None = None


@dataclass(frozen=True)
class RouteFlags:
    """NamesrvConfig switches that change the state machine."""

    delete_topic_with_broker_registration: bool = False


DEFAULT_FLAGS = RouteFlags()

# (group topics ref, registration topics ref, wipe write) -> True: applying that registration's
# topic configs to that table changes nothing. A pure function of the two contents, so
# remembering it is exact; it spares decoding a 10 000-topic table for every chunk of a split
# registration, each of which carries a new dataVersion (RocketMQ 5.1.4-5.3.3).
_NO_OP_APPLICATIONS: OrderedDict[tuple[str, str, bool], bool] = OrderedDict()
_NO_OP_LIMIT = 100_000
# (group topics ref, registration topics ref) -> True: every topic the registration names is
# in that table, so re-sending it under the same dataVersion applies nothing. Also a pure
# function of two contents; it spares splitting 10 000 names for every registration of a
# group that still holds a topic its brokers no longer send (RocketMQ keeps it).
_NAMES_HELD: OrderedDict[tuple[str, str], bool] = OrderedDict()


class _ConfigPlan(NamedTuple):
    """The topic configs a registration sets, and what its content is known by."""

    configs: list[TopicConfigLike]
    table_ref: str | None  # set when the configs are the registration's whole table
    memo: tuple[str, str, bool] | None  # (group topics, registration, wipe) content refs
    # the configs' rows as set before any wipe, built already (a whole packed table):
    # `configs` unused
    rows: dict[str, QueueData] | None = None
    whole: bool = False  # the configs are the registration's whole table (a new dataVersion)


def _differing(rows: dict[str, QueueData], held: TopicTable) -> dict[str, QueueData]:
    """The rows that differ from the held table's (new topics included), in their order:
    only those can change anything when every config is set. Compared as sets of (topic,
    row) pairs, in C: a topic change of a 10 000-topic group keeps a few."""
    if not held:
        return rows
    differ = {topic for topic, _ in rows.items() - held.rows().items()}
    if not differ:
        return {}
    return {topic: rows[topic] for topic in compress(rows, map(differ.__contains__, rows))}


@dataclass
class GroupRoutes:
    """brokerAddrTable[name], clusterAddrTable entries naming it, topicQueueTable[*][name],
    and the brokerLiveTable / filterServerTable rows of the group's addresses."""

    broker_name: str
    broker_data: BrokerData | None = None
    clusters: set[str] = field(default_factory=set)
    # topicQueueTable[*][name] as base + overlay (core/overlay.py); immutable: a change
    # assigns a new value. `topics` is its effective slice.
    topic_state: GroupTopics = field(default_factory=lambda: EMPTY_GROUP_TOPICS)
    live: dict[BrokerKey, BrokerLive] = field(default_factory=dict)
    filter_servers: dict[BrokerKey, list[str]] = field(default_factory=dict)
    # KVConfigManager's table: only the KV group (ingest.KV_KEY) has entries
    kv: dict[str, dict[str, str]] = field(default_factory=dict)
    # The connections each live broker's requests arrived on since it last became live
    # (contract §2, "Connections (channels)"), in the order they were added. Only brokers
    # with a channel have an entry: absent = the empty set, and every key is a `live` key
    # (whatever removes a broker from `live` removes its entry: `_drop_live`).
    channels: dict[BrokerKey, tuple[str, ...]] = field(default_factory=dict)

    # False: every fault is applied to the topic rows themselves, as before issue 36 (the
    # reference the group-level state is tested against: tests/test_group_overlay.py)
    group_level: ClassVar[bool] = True

    @property
    def topics(self) -> TopicTable:
        """The group's topicQueueTable slice: present ? perm_op(base ∩ covered) : {}."""
        return self.topic_state.effective()

    @topics.setter
    def topics(self, table: TopicTable) -> None:
        self.topic_state = self.topic_state.with_effective(table)

    def is_empty(self) -> bool:
        return not (
            self.broker_data
            or self.clusters
            or self.topics
            or self.live
            or self.filter_servers
            or self.kv
        )

    def keeps_nothing(self) -> bool:
        """Empty, and no base to keep either: the group's state can go. An absent group keeps
        its base, so its return with the same table is O(1) (core/overlay.py)."""
        return self.is_empty() and not self.topic_state.base

    # -- REGISTER_BROKER ------------------------------------------------------------------
    def register(self, event: RegisterEvent, now: int, flags: RouteFlags) -> bool:
        """Apply a full registration; False when rejected for a stale stateVersion."""
        cluster, addr, broker_id = event.clusterName, event.brokerAddr, event.brokerId
        self.clusters.add(cluster)
        register_first = self.broker_data is None
        if self.broker_data is None:
            self.broker_data = BrokerData(cluster=cluster)
        data = self.broker_data
        old_version_broker = event.enableActingMaster is None
        data.enable_acting_master = bool(event.enableActingMaster)
        data.zone_name = event.zoneName
        addrs = data.broker_addrs

        # Role switch: one address holds one id, so drop its other ids first.
        for stale_id in [i for i, a in addrs.items() if a == addr and i != broker_id]:
            del addrs[stale_id]

        version = _data_version(event)
        holder = addrs.get(broker_id)
        if holder is not None and holder != addr:
            holder_live = self.live.get((cluster, holder))
            if holder_live and holder_live.data_version.state_version > version.state_version:
                self.live.pop((cluster, addr), None)
                self.channels.pop((cluster, addr), None)
                return False

        previous_addr = addrs.get(broker_id)
        addrs[broker_id] = addr
        register_first = register_first or not previous_addr

        is_master = broker_id == MASTER_ID
        is_prime_slave = not old_version_broker and not is_master and broker_id == min(addrs)
        if is_master or is_prime_slave:
            self._apply_topic_config(event, version, register_first, is_prime_slave, flags)

        self.live[(cluster, addr)] = BrokerLive(
            last_update_timestamp=now,
            heartbeat_timeout_millis=event.heartbeatTimeoutMillis
            or DEFAULT_HEARTBEAT_TIMEOUT_MILLIS,
            data_version=version,
            ha_server_addr=event.haServerAddr,
        )
        if event.filterServerList is not None:
            if event.filterServerList:
                self.filter_servers[(cluster, addr)] = list(event.filterServerList)
            else:
                self.filter_servers.pop((cluster, addr), None)
        return True

    def _apply_topic_config(
        self,
        event: RegisterEvent,
        version: DataVersion,
        register_first: bool,
        is_prime_slave: bool,
        flags: RouteFlags,
    ) -> None:
        """RouteInfoManager's topic config part of registerBroker: with a new dataVersion (or
        a first registration) every config is set, else only the topics missing from the
        group's routes (isTopicConfigChanged). Each path first tries its shortcuts, which
        decide "nothing changes" without decoding the registration's table."""
        table = event.topicConfigTable
        wipe_write = (
            is_prime_slave
            and self.broker_data is not None
            and self.broker_data.enable_acting_master
        )
        previous = self.live.get((event.clusterName, event.brokerAddr))
        full = register_first or previous is None or previous.data_version != version
        drop = flags.delete_topic_with_broker_registration
        if self._base_returns(table, wipe_write, full, drop):
            return
        if drop:
            self._drop_topics_not_in(table)
        if full:
            plan = self._every_config(table, wipe_write)
        else:
            plan = self._missing_configs(table)
        if plan is not None:
            self._set_configs(plan, wipe_write)

    def _drop_topics_not_in(self, table: Mapping[str, TopicConfigLike]) -> None:
        """deleteTopicWithBrokerRegistration: the group's topics the registration lacks go."""
        keep = set(topic_names(table))
        self.topics = self.topics.without(t for t in self.topics.names() if t not in keep)

    def _every_config(
        self, table: Mapping[str, TopicConfigLike], wipe_write: bool
    ) -> _ConfigPlan | None:
        """A new dataVersion: every config is set. None when that is known to change nothing:
        the table was built by applying this very content (O(1), no decode), or applying it
        to this table was a no-op before (_NO_OP_APPLICATIONS)."""
        table_ref = getattr(table, "ref", None)
        if table_ref is not None and self.topics.applied_registration == (table_ref, wipe_write):
            return None
        held_ref = self.topics.content_ref()
        memo = (held_ref, table_ref, wipe_write) if held_ref and table_ref else None
        if memo is not None and memo in _NO_OP_APPLICATIONS:
            return None
        if isinstance(table, LazyTopicTable):
            # the rows straight from the packed table (a first registration sets them all)
            rows = table.queue_rows()
            if wipe_write:
                return _ConfigPlan([], table_ref, memo, rows, whole=True)
            return _ConfigPlan([], table_ref, memo, _differing(rows, self.topics))
        configs = list(table.values())
        if not wipe_write and self.topics:
            # Every config is set, but only those that differ from the group's rows can
            # change anything (a QueueData is a tuple: it equals the config's four values),
            # so build rows for those only: a topic change of a 10 000-topic group builds
            # a few, and the table comes out the same (same keys in the same order).
            held_row = self.topics.rows().get
            configs = [
                c
                for c in configs
                if held_row(c.topicName)
                != (c.readQueueNums, c.writeQueueNums, c.perm, c.topicSysFlag)
            ]
        return _ConfigPlan(configs, table_ref, memo, whole=True)

    def _missing_configs(self, table: Mapping[str, TopicConfigLike]) -> _ConfigPlan | None:
        """Same dataVersion: only topics missing from this group's routes are (re)applied
        (RouteInfoManager.isTopicConfigChanged). Usually none, so decode nothing: the same
        contents as before by reference (the table was built from it, or it was seen to hold
        every name: _NAMES_HELD), else the names, which usually match the table's in order
        (a list compare). None: nothing is missing."""
        table_ref = getattr(table, "ref", None)
        applied = self.topics.applied_registration
        if table_ref is not None and applied is not None and applied.table_ref == table_ref:
            return None  # built by applying this very content: it holds every name
        held_ref = self.topics.content_ref()
        covered = (held_ref, table_ref) if held_ref and table_ref else None
        if covered is not None and covered in _NAMES_HELD:
            return None
        registered, held = topic_names(table), self.topics.names()
        missing: set[str] = set()
        if registered != held:
            held_set = set(held)
            missing = {n for n in registered if n not in held_set}
        if not missing:
            if covered is not None:
                _remember(_NAMES_HELD, covered)
            return None
        configs = [c for c in table.values() if c.topicName in missing]
        # a partial application: the table will hold only what was missing (no table_ref)
        return _ConfigPlan(configs, None, None)

    def _set_configs(self, plan: _ConfigPlan, wipe_write: bool) -> None:
        """Set the plan's configs as QueueData rows (without the write permission for an
        acting master's prime slave), then remember what the result tells about the
        registration's content for the shortcuts above."""
        configs = plan.configs
        before = self.topics
        if plan.rows is not None:
            rows = plan.rows
        else:  # built in C (a group's first or returning registration: all)
            rows = dict(
                zip(
                    map(_TOPIC_NAME, configs),
                    map(QueueData._make, map(_QUEUE_DATA, configs)),
                    strict=True,
                )
            )
        if wipe_write:
            if plan.whole and self.group_level and self._set_wiped_whole(rows, plan):
                return
            changes = dict(zip(rows, map(PermOp.WIPE.queue, rows.values()), strict=True))
        else:
            changes = rows
        # a new table holds every config of the registration (RocketMQ sets them all)
        ref = plan.table_ref
        applied = None if ref is None else AppliedRegistration(ref, wipe_write)
        self.topics = before.updated(changes, applied)
        if plan.memo is not None and self.topics is before:  # the whole table changed nothing
            _remember_no_op(plan.memo)

    def _set_wiped_whole(self, rows: dict[str, QueueData], plan: _ConfigPlan) -> bool:
        """An acting master's prime slave sets its whole table wiped (`rows`: as configured).
        When the slice held no topic outside that table, the slice becomes exactly WIPE(rows):
        stored as base = `rows` + a WIPE overlay, so the base stays the master's table (its
        return after the slave's is O(1), and the slave's wipe of an unchanged table writes no
        base row). False: the slice keeps other topics, set the rows as RocketMQ does."""
        names = self.topics.names()  # without deriving a wiped slice's rows
        if not all(map(rows.__contains__, names)):
            return False
        state = self.topic_state
        base = state.base
        if base.rows() != rows:  # compared in C; a topic change differs in a few
            # the slice's order first, as setting the configs over it would leave it
            ordered = dict(zip(names, map(rows.__getitem__, names), strict=True))
            ordered.update(rows)
            ref = plan.table_ref
            applied = None if ref is None else AppliedRegistration(ref, False)
            base = TopicTable(ordered, applied_registration=applied)
        wiped = Overlay(True, PermOp.WIPE, None)
        if base is state.base and state.overlay == wiped:
            if plan.memo is not None:
                _remember_no_op(plan.memo)  # the whole table changed nothing
            return True
        self.topic_state = GroupTopics(base, wiped)
        return True

    def _base_returns(
        self, table: object, wipe_write: bool, full: bool, drop_unlisted: bool
    ) -> bool:
        """O(1), by reference: the registration's configs, applied as RocketMQ applies them,
        make the group's slice exactly its base under ID or WIPE (a return with the table it
        left with, a prime slave's acting-master wipe, the master's return after it, a new
        dataVersion after an admin WIPE). Sets the overlay and says so; False: decide by rows.

        Exact: the base holds every config of the registration as applied with a known wipe
        flag (its `applied_registration`, or the no-op memo, by content) and has as many
        topics, so its names are the registration's. A full application sets every config,
        so the slice becomes those rows (wiped for a prime slave) whatever it held before: its
        names are the base's or fewer. A same-dataVersion registration applies only missing
        topics: none are missing while the whole base is present."""
        table_ref = getattr(table, "ref", None)
        state = self.topic_state
        if not self.group_level or table_ref is None or not state.base:
            return False
        held_wiped = self._base_holds(table_ref)
        if held_wiped is None:
            return False
        same_names = len(state.base) == len(table)  # type: ignore[arg-type]  # a topic table
        if not full:
            whole = state.overlay.present and state.overlay.covered is None
            return whole and (same_names or not drop_unlisted)
        if not same_names:
            return False
        if held_wiped == wipe_write:
            op = PermOp.ID
        elif wipe_write:
            op = PermOp.WIPE  # the base holds the configs unwiped; a prime slave wipes them
        else:
            return False  # the base holds them wiped: unwiped rows are no op of it
        self.topic_state = state.returned(op)
        return True

    def _base_holds(self, table_ref: str) -> bool | None:
        """With which wipe flag the base holds every config of that registration (None: not
        known to)."""
        base = self.topic_state.base
        applied = base.applied_registration
        if applied is not None:
            return applied.write_wiped if applied.table_ref == table_ref else None
        held_ref = base.content_ref()
        if held_ref is None:
            return None
        for wiped in (False, True):
            if (held_ref, table_ref, wiped) in _NO_OP_APPLICATIONS:
                return wiped
        return None

    # -- BROKER_HEARTBEAT -----------------------------------------------------------------
    def heartbeat(self, cluster: str, addr: str, now: int) -> bool:
        live = self.live.get((cluster, addr))
        if live is None:
            return False
        self.live[(cluster, addr)] = BrokerLive(  # not dataclasses.replace: the hot path
            now, live.heartbeat_timeout_millis, live.data_version, live.ha_server_addr
        )
        return True

    # -- connections: BrokerHousekeepingService -> onChannelDestroy ------------------------
    def add_channel(self, key: BrokerKey, channel: str) -> None:
        """A request of live broker `key` arrived on `channel`: that collector's connections
        of earlier incarnations are gone (it restarted), then `channel` joins the set."""
        held = self.channels.get(key, ())
        if held == (channel,):
            return  # the usual heartbeat: one connection, already held
        arrived = _channel_id(channel)
        kept = tuple(c for c in held if c != channel and not _superseded(c, arrived))
        self.channels[key] = (*kept, channel)

    def channel_closed(self, cluster: str, addr: str, channel: str) -> bool:
        """A connection of broker (cluster, addr) closed: it leaves the broker's set, and the
        broker is removed, as expiry removes it, once the set is empty. True if removed."""
        key = (cluster, addr)
        held = self.channels.get(key, ())
        if channel not in held:
            return False  # not live, never on that connection, or a repeated close
        rest = tuple(c for c in held if c != channel)
        if rest:
            self.channels[key] = rest
            return False
        self._remove_broker(key)
        return True

    # -- UNREGISTER_BROKER ----------------------------------------------------------------
    def unregister(self, cluster: str, addr: str) -> None:
        self._drop_live((cluster, addr))
        data = self.broker_data
        if data is None:
            return
        for broker_id in [i for i, a in data.broker_addrs.items() if a == addr]:
            del data.broker_addrs[broker_id]
        if not data.broker_addrs:
            # The group is gone: its name leaves the cluster and every topic.
            self.broker_data = None
            self.clusters.discard(cluster)
            if self.group_level:
                self.topic_state = self.topic_state.removed()
            else:
                self.topics = EMPTY_TOPICS
        elif data.enable_acting_master and min(data.broker_addrs) > MASTER_ID:
            self._write_perm(PermOp.WIPE)

    # -- scanNotActiveBroker + onChannelDestroy -------------------------------------------
    def expire(self, now: int) -> list[tuple[BrokerKey, int]]:
        """Expire every broker whose deadline is strictly before `now`; returns (key, deadline)."""
        expired = sorted(
            ((live.deadline, key) for key, live in self.live.items() if live.deadline < now)
        )
        for _, key in expired:
            self._remove_broker(key)
        return [(key, deadline) for deadline, key in expired]

    def _remove_broker(self, key: BrokerKey) -> None:
        """onChannelDestroy: an unregister of that broker address, with the brokerName and
        cluster cascade (expiry and a broker's last closed connection alike)."""
        cluster, addr = key
        data = self.broker_data
        if data is not None and data.cluster == cluster and addr in data.broker_addrs.values():
            self.unregister(cluster, addr)
        else:
            # Not listed in brokerAddrTable: Java would keep it forever (contract §3).
            self._drop_live(key)

    def _drop_live(self, key: BrokerKey) -> None:
        """The broker leaves brokerLiveTable and filterServerTable, with its connections."""
        self.live.pop(key, None)
        self.filter_servers.pop(key, None)
        self.channels.pop(key, None)

    # -- administrative requests (contract §2) ---------------------------------------------
    def write_perm(self, wipe: bool) -> int:
        """operateWritePermOfBroker: wipe clears PERM_WRITE, add sets RW; returns the count."""
        size = self.topic_state.size()
        if size:
            self._write_perm(PermOp.WIPE if wipe else PermOp.RW)
        return size

    def _write_perm(self, op: PermOp) -> None:
        if self.group_level:
            self.topic_state = self.topic_state.perm_changed(op)
        else:
            self.topics = self.topics.mapped(_without_write if op is PermOp.WIPE else _read_write)

    def delete_topic(self, topic: str, cluster: str | None) -> bool:
        """deleteTopic: everywhere, or only if this brokerName is in clusterAddrTable[cluster]."""
        if topic not in self.topics.names() or (
            cluster is not None and cluster not in self.clusters
        ):
            return False
        if self.group_level:
            self.topic_state = self.topic_state.without([topic])
        else:
            self.topics = self.topics.without([topic])
        return True

    def next_deadline(self) -> int | None:
        return min((live.deadline for live in self.live.values()), default=None)


@lru_cache(maxsize=4096)
def _channel_id(channel: str) -> ChannelId:
    """A validated channel's parts (a fleet reuses a few connections: parsed once each)."""
    return parse_channel(channel)


def _superseded(held: str, arrived: ChannelId) -> bool:
    """`held` is a connection of the collector `arrived` came from, of an earlier run."""
    other = _channel_id(held)
    return other.collector == arrived.collector and other.incarnation < arrived.incarnation


def _remember(memo: OrderedDict[_Memo, bool], key: _Memo) -> None:
    memo[key] = True
    if len(memo) > _NO_OP_LIMIT:
        memo.popitem(last=False)


def _remember_no_op(key: tuple[str, str, bool]) -> None:
    _remember(_NO_OP_APPLICATIONS, key)


def remember_held_registration(topics: TopicTable, held_ref: str) -> None:
    """`topics` was stored as content under `held_ref`: if a registration built it, remember
    by reference that applying that registration to it changes nothing. The group's next
    steps read the table back from state (a new object), and a broker returning with the same
    topics re-sends that content: its application is then O(1)."""
    if topics.applied_registration is not None:
        _remember_no_op((held_ref, *topics.applied_registration))


def _data_version(event: RegisterEvent) -> DataVersion:
    v = event.dataVersion
    return DataVersion(v.stateVersion, v.timestamp, v.counter)


def _without_write(queue: QueueData) -> QueueData:
    return QueueData(
        queue.read_queue_nums,
        queue.write_queue_nums,
        queue.perm & ~PERM_WRITE,
        queue.topic_sys_flag,
    )


def _read_write(queue: QueueData) -> QueueData:
    return QueueData(
        queue.read_queue_nums, queue.write_queue_nums, PERM_READ | PERM_WRITE, queue.topic_sys_flag
    )


def apply_event(routes: GroupRoutes, event: Event, flags: RouteFlags) -> None:
    """Apply one event at its own eventTime (expiry before it is the caller's job)."""
    if isinstance(event, RegisterEvent):
        key = (event.clusterName, event.brokerAddr)
        if key not in routes.live:
            routes.channels.pop(key, None)  # a registration that makes it live: no connections
        if routes.register(event, event.eventTime, flags) and event.channel is not None:
            routes.add_channel(key, event.channel)
    elif isinstance(event, HeartbeatEvent):
        applied = routes.heartbeat(event.clusterName, event.brokerAddr, event.eventTime)
        if applied and event.channel is not None:
            routes.add_channel((event.clusterName, event.brokerAddr), event.channel)
    elif isinstance(event, UnregisterEvent):
        routes.unregister(event.clusterName, event.brokerAddr)
    elif isinstance(event, ChannelClosedEvent):
        routes.channel_closed(event.clusterName, event.brokerAddr, event.channel)
    elif isinstance(event, WritePermEvent):
        routes.write_perm(event.eventType == "WIPE_WRITE_PERM")
    elif isinstance(event, DeleteTopicEvent):
        routes.delete_topic(event.topic, event.cluster)
    elif isinstance(event, PutKvEvent):
        routes.kv.setdefault(event.namespace, {})[event.key] = event.value
    elif isinstance(event, DeleteKvEvent):
        # deleteKVConfig: the namespace stays, even when emptied
        routes.kv.get(event.namespace, {}).pop(event.key, None)
