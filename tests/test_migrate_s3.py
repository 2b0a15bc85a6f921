"""`routectl migrate` on object storage (moto's S3 server, tests/support/s3_support.py): a
per-topic warehouse and the job's checkpoint logs under s3:// prefixes, migrated with delta-rs
through routing_lib/storage.py; the tables then derive the stored ones. No Spark."""

from __future__ import annotations

import pytest

from routing_lib import storage
from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
)
from routing_lib.layout import old_layout_reason
from routing_lib.migrate import JobMayBeRunning, check_stopped, migrate
from tests.support.s3_support import S3Endpoint
from tests.test_migrate import (
    PER_TOPIC,
    Model,
    _batches,
    _by_identity,
    _derived_history,
    _keyed,
    _read,
    _run,
    old_warehouse,
)

pytestmark = pytest.mark.s3


def test_a_warehouse_on_s3_is_migrated(s3_endpoint: S3Endpoint) -> None:  # noqa: F811
    root = s3_endpoint.prefix("s3a")
    warehouse, checkpoint = f"{root}/warehouse", f"{root}/checkpoint"
    events, sizes = _batches(19)
    model = Model(True)
    model.config = PER_TOPIC
    _run(model, events, sizes, 0, len(sizes))
    old_warehouse(warehouse, model)
    for log, ids in (("offsets", (0, 1)), ("commits", (0,))):
        for n in ids:
            storage.write_text(storage.join(checkpoint, log, str(n)), "v1\n{}")
    with pytest.raises(JobMayBeRunning, match="batch 1 was started"):
        check_stopped(warehouse, checkpoint, quiet_s=0)
    storage.write_text(storage.join(checkpoint, "commits", "1"), "v1\n{}")
    check_stopped(warehouse, checkpoint, quiet_s=0)
    assert old_layout_reason(warehouse) is not None

    migrate(warehouse, model.group_states())

    assert old_layout_reason(warehouse) is None
    queue = storage.open_delta(storage.join(warehouse, TOPIC_QUEUE))
    assert queue.metadata().partition_columns == ["broker_name"]
    assert _keyed(_read(warehouse, TOPIC_QUEUE), TOPIC_QUEUE) == model.tables[TOPIC_QUEUE]
    assert _read(warehouse, TOPIC_BASE)
    derived = _derived_history(
        _read(warehouse, TOPIC_BASE_CHANGES), _read(warehouse, TOPIC_OVERLAY_CHANGES)
    )
    assert derived == _by_identity(model.history.values())
    assert migrate(warehouse, model.group_states()).already
