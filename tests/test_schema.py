"""One schema: pydantic validation, JSON Schema export, Spark StructType."""

from __future__ import annotations

import json

import pytest

from routing_lib.cli import main
from schemas import ValidationFailure, event_json_schema, parse_event
from schemas.route_event import parse_pipeline_event
from tests.support.bad_records import BAD_RECORDS
from tests.support.helpers import FIXTURES, fixture_lines


@pytest.mark.parametrize(
    "parse", [parse_event, parse_pipeline_event], ids=["event-schema", "pipeline-hot-path"]
)
@pytest.mark.parametrize("kind,raw,word", BAD_RECORDS, ids=[b[0] for b in BAD_RECORDS])
def test_bad_record_is_rejected_with_a_reason(kind, raw, word, parse):
    """Both parsers (the hot path validates topic configs as dicts) reject it, same reason."""
    with pytest.raises(ValidationFailure) as failure:
        parse(raw)
    assert word in failure.value.reason


def test_every_fixture_line_is_valid():
    for name in FIXTURES:
        for line in fixture_lines(name):
            parse_event(line)


def test_defaults_inside_topic_config_and_extra_fields():
    event = parse_event(
        json.dumps(
            {
                "eventType": "REGISTER",
                "eventTime": 5,
                "clusterName": "c",
                "brokerAddr": "h:1",
                "brokerName": "b",
                "brokerId": 0,
                "dataVersion": {"counter": 2},
                "topicConfigTable": {"T": {"topicName": "T"}},
                "somethingNew": 1,
            }
        )
    )
    config = event.topicConfigTable["T"]
    assert (config.readQueueNums, config.writeQueueNums, config.perm, config.topicSysFlag) == (
        16,
        16,
        6,
        0,
    )
    assert (event.dataVersion.stateVersion, event.dataVersion.timestamp) == (0, 0)


def test_json_schema_export(capsys):
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(event_json_schema()))
    assert {"REGISTER", "HEARTBEAT", "UNREGISTER"} <= set(json.dumps(printed).split('"'))


def test_spark_schema_is_derived_from_the_models():
    pytest.importorskip("pyspark")
    from schemas.spark import event_struct

    struct = event_struct()
    names = struct.fieldNames()
    assert names[:6] == [
        "eventTime",
        "clusterName",
        "brokerAddr",
        "brokerName",
        "brokerId",
        "eventType",
    ]
    topic_config = struct["topicConfigTable"].dataType.valueType
    assert topic_config.fieldNames() == [
        "topicName",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicSysFlag",
        "order",
    ]
    assert struct["filterServerList"].dataType.simpleString() == "array<string>"


def test_pipeline_schema_packs_the_same_event_as_the_event_schema():
    from routing_lib.core.wire import pack_event, unpack_event
    from schemas.route_event import parse_pipeline_event

    for name in FIXTURES:
        for line in fixture_lines(name):
            fast, model = parse_pipeline_event(line), parse_event(line)
            if model.eventType == "TICK":
                assert fast == model
                continue
            unpacked = unpack_event(pack_event(fast))
            head = {"topicConfigTable"}
            assert unpacked.model_dump(exclude=head) == model.model_dump(exclude=head)
            if model.eventType == "REGISTER":
                assert {k: c._asdict() for k, c in unpacked.topicConfigTable.items()} == {
                    k: c.model_dump() for k, c in model.topicConfigTable.items()
                }
