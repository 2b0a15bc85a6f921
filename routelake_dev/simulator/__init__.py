"""A seeded RocketMQ broker-fleet simulator producing contract §2 events.

Modules by role:

* `generation`: pure, deterministic for a seed, no I/O (`FleetSimulator`, `iter_history`,
  `generate_history`, `simulate_history`, `with_admin_events`);
* `encoding`: events as JSON lines (`EventEncoder`, `encode_event`), `.jsonl.gz` archives
  (`ArchiveWriter`) and reading them back (`iter_file_lines`, `line_key`);
* `delivery`: Kafka producing with kafka-python (`simulate`, `produce_files`, `make_producer`);
* `cli`: the `routectl simulate` / `routectl produce` arguments and handlers.

The fleet: `brokers` broker groups (brokerName `broker-<i>`) spread over 1-3 clusters, each a
master (brokerId 0) and 0-2 slaves, every one a process with its own address. Every broker
REGISTERs every `period_ms` with its group's full topicConfigTable (3 system topics plus
`topics` user topics `Topic<j>` drawn from a shared pool) and sends `heartbeats_per_period`
lightweight HEARTBEATs in between. Slaves carry the master's table and dataVersion (synced).
Some brokers override heartbeatTimeoutMillis, some groups set enableActingMaster (others send
false or, like old brokers, nothing), some set zoneName, some brokers send their
filterServerList on every registration and others only when it changed.

Faults arrive per group at random (mean `fault_interval_ms`, one at a time per group):

    crash          a broker goes silent past its heartbeat timeout (so it expires); most
                   come back later with a fresh REGISTER
    unregister     graceful shutdown: UNREGISTER; most come back later
    restart        silent for less than the timeout, then REGISTER again (never expires)
    role_switch    the master UNREGISTERs, a slave REGISTERs as id 0 with stateVersion+1,
                   the old master returns as a slave with the slave's old id
    topic_change   the master changes perms / queue numbers, adds or drops topics, bumps
                   dataVersion (counter, timestamp) and re-registers at once
    filter_servers a broker's filter server list is set or cleared (sent on next REGISTER)

`eventTime` is the collector's receive time on the simulated clock (`start_ms`; wall clock in
live mode). Within a brokerName no two events share an eventTime, so State(T) never depends on
arrival order. Arrival order may be shuffled within `disorder_ms`: every event is delayed by a
seeded random 0..disorder_ms, so an event never arrives after one that is more than
disorder_ms younger. The disorder uses its own random stream: the events themselves do not
depend on `disorder_ms`.
"""

from routelake_dev.simulator.delivery import (
    SimulateStats,
    check_topic,
    make_producer,
    produce_files,
    simulate,
)
from routelake_dev.simulator.encoding import (
    ArchiveWriter,
    EventEncoder,
    encode_event,
    iter_file_lines,
    line_key,
)
from routelake_dev.simulator.generation import (
    DEFAULT_PERIOD_MS,
    DEFAULT_START_MS,
    FAULT_KINDS,
    Event,
    Fault,
    FleetSimulator,
    generate_history,
    iter_history,
    simulate_history,
    with_admin_events,
    with_disorder,
)

__all__ = [
    "DEFAULT_PERIOD_MS",
    "DEFAULT_START_MS",
    "FAULT_KINDS",
    "ArchiveWriter",
    "Event",
    "EventEncoder",
    "Fault",
    "FleetSimulator",
    "SimulateStats",
    "check_topic",
    "encode_event",
    "generate_history",
    "iter_file_lines",
    "iter_history",
    "line_key",
    "make_producer",
    "produce_files",
    "simulate",
    "simulate_history",
    "with_admin_events",
    "with_disorder",
]
