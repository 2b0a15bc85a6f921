"""The Spark view of the derived topic_route_history (routing_lib/spark/history_views.py).

A seeded fleet history with admin events through the shipped step; its change rows written
to real Delta tables with delta-rs; the temp view `topic_route_history` (applyInPandas per
broker group) equals HistoryTracker's rows, every column, and a recipe's SQL that reads the
view by name answers from it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from routing_lib import history_recipes as hr
from routing_lib.core.group_routes import DEFAULT_FLAGS
from routing_lib.spark.history_views import register_history_views
from tests.support.event_strategies import History
from tests.support.helpers import random_history, registration_modes
from tests.test_route_history_read import _keyed, _model, write_changes

pytestmark = pytest.mark.spark


def test_the_view_equals_the_tracker_rows(spark, tmp_path: Path) -> None:
    from routelake_dev.simulator import with_admin_events

    rng = random.Random(11)
    records = registration_modes(random_history(11, rng), rng)
    records = with_admin_events(records, 11, every=5)
    sizes = [rng.randint(1, 40) for _ in range(len(records))]
    model = _model(History(records, 10_000, sizes, DEFAULT_FLAGS, content_refs=True))
    write_changes(tmp_path, *model.change_rows)
    want = _keyed(model.history.values())
    assert want and any(r["started_by"] == "PERM_WIPED" for r in want.values())

    register_history_views(spark, tmp_path)
    got = [row.asDict() for row in spark.table("topic_route_history").collect()]
    assert _keyed(got) == want

    # a recipe reading the view by name (spark_sql registers it for its warehouse)
    lost = hr.spark_sql(spark, hr.WRITE_PERM_LOST_SQL, tmp_path, start=0, end=2**62).collect()
    frames = {"topic_route_history": list(want.values())}
    expected = hr.write_perm_lost(frames, 0, 2**62)
    assert [(r.topic, r.broker_name, r.lost_at) for r in lost] == list(
        expected[["topic", "broker_name", "lost_at"]].itertuples(index=False, name=None)
    )
    assert len(lost) > 0
