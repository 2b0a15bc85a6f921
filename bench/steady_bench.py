"""The stress run's steady micro-batch, reproduced from a backlog: the real job on the local Kafka,
a fixed number of events per batch, no producer racing it.

    .venv/bin/python -m bench.steady_bench produce --brokers 300 --topics 10000 --duration 150
    .venv/bin/python -m bench.steady_bench run --topic steady-XXXXXXXX --max-offsets 500

`produce` writes the stress profile's fleet (`stream_bench realtime`'s simulator: a REGISTER of
every broker every 30 s, HEARTBEATs between, a fault per group every --fault-interval-ms) for
--duration seconds of event time, dated so that it ends now, to a fresh topic (keyed by
brokerName, as the live run sends it) and prints the topic's name. It is produced once and read
by any number of `run`s (each with a fresh warehouse and checkpoint).

`run` drains the topic with `routectl run --available-now` and `maxOffsetsPerTrigger`
--max-offsets: ~500 events is the live stress run's batch (7 s of its arrival). Every batch's
seconds and phases (the writer's `step`: the stateful plan; `tables`; `progress`) are printed,
with Spark's state-operator figures; the medians are taken over the batches whose watermark is
past --skip-s seconds of event time (the cold start's first registrations are another cost).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from bench.backfill_bench import HEARTBEATS_PER_PERIOD, PERIOD_MS, SEED


def produce(args, config) -> None:
    from routelake_dev import kafka_local
    from routelake_dev.simulator import EventEncoder, iter_history, make_producer

    kafka_local.start(config.kafka)
    topic = f"steady-{uuid.uuid4().hex[:8]}"
    kafka_local.create_topic(config.kafka.bootstrap_servers, topic)
    duration_ms = int(args.duration * 1000)
    start_ms = int(time.time() * 1000) - duration_ms
    history = iter_history(
        SEED,
        args.brokers,
        args.topics,
        duration_ms,
        PERIOD_MS,
        start_ms,
        heartbeats_per_period=HEARTBEATS_PER_PERIOD,
        fault_interval_ms=args.fault_interval_ms,
    )
    # no compression (gzip of 1 MB registrations in Python is the producer's bottleneck), and
    # every send confirmed: a send that timed out on a loaded machine would drop its events
    producer = make_producer(
        config.kafka.bootstrap_servers, acks=1, linger_ms=50, compression_type=None, retries=10
    )
    encode, sent, size, registers, pending = EventEncoder(), 0, 0, 0, []
    for event in history:
        value = encode(event)
        pending.append(producer.send(topic, key=event["brokerName"].encode(), value=value))
        sent, size = sent + 1, size + len(value)
        registers += event["eventType"] == "REGISTER"
        if len(pending) >= 100:
            for future in pending:
                future.get(timeout=120)
            pending = []
    for future in pending:
        future.get(timeout=120)
    producer.flush()
    producer.close()
    print(
        f"topic {topic}: {sent} events ({registers} REGISTERs), {size / 1e6:.0f} MB, "
        f"event time from {start_ms}"
    )


class _Batches(logging.Handler):
    """The job's per-batch log lines and Spark's progress events, as they come."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches: dict[int, dict] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if not record.msg.startswith("batch %d published"):
            return
        args: Any = record.args  # ("batch %d published: ...", its five values)
        batch_id, watermark, seconds, phases, counts = args
        row = self.batches.setdefault(batch_id, {})
        row.update(watermark=watermark, seconds=seconds, input=counts.get("input_rows", 0))
        row.update({k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)s", phases)})


def _listener(batches: _Batches):
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            progress = json.loads(event.progress.json)
            row = batches.batches.setdefault(progress["batchId"], {})
            row["trigger"] = progress["durationMs"].get("triggerExecution", 0) / 1000
            row["kafka_rows"] = progress["numInputRows"]
            for op in progress.get("stateOperators", []):
                row["state_update_ms"] = op.get("allUpdatesTimeMs", 0)
                row["state_commit_ms"] = op.get("commitTimeMs", 0)
                row["state_rows"] = op.get("numRowsTotal", 0)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return Progress()


def _stage_times(event_log: Path, batch_ids: set[int]) -> dict[int, list[str]]:
    """Per batch: each Spark stage's wall time (first task launched to last task finished),
    its tasks' summed run time and the stage's name, from Spark's event log."""
    jobs_of: dict[int, int] = {}  # stage id -> batch id
    names: dict[int, str] = {}
    spans: dict[int, list[float]] = {}
    run_ms: dict[int, int] = {}
    tasks: dict[int, int] = {}
    for path in sorted(event_log.rglob("events_*")):
        for line in path.open():
            if not line.strip():
                continue
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                batch = (event.get("Properties") or {}).get("streaming.sql.batchId")
                if batch is not None:
                    for stage in event["Stage IDs"]:
                        jobs_of[stage] = int(batch)
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                names[info["Stage ID"]] = info["Stage Name"].split(" at ")[0]
            elif kind == "SparkListenerTaskEnd":
                stage, info = event["Stage ID"], event["Task Info"]
                span = spans.setdefault(stage, [info["Launch Time"], info["Finish Time"]])
                span[0] = min(span[0], info["Launch Time"])
                span[1] = max(span[1], info["Finish Time"])
                run_ms[stage] = run_ms.get(stage, 0) + event["Task Metrics"]["Executor Run Time"]
                tasks[stage] = tasks.get(stage, 0) + 1
    out: dict[int, list[str]] = {}
    for stage in sorted(spans):
        batch = jobs_of.get(stage)
        if batch in batch_ids:
            wall = (spans[stage][1] - spans[stage][0]) / 1000
            out.setdefault(batch, []).append(
                f"stage {stage} {names.get(stage, '?')}: {wall:.2f} s wall, "
                f"{tasks[stage]} tasks, {run_ms[stage] / 1000:.2f} s run"
            )
    return out


def run(args, config) -> None:
    from routing_lib.jobs.route_state import run_route_state
    from routing_lib.spark.session import build_spark

    work = Path(args.workdir).resolve() / f"{args.topic}-{uuid.uuid4().hex[:6]}"
    event_log = work / "spark-events"
    event_log.mkdir(parents=True)
    # Spark's event log: where each stage of a batch spent its time (read after the run)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{event_log}"
        " --conf spark.eventLog.compress=false pyspark-shell"
    )
    job = config.with_overrides(
        "kafka", topic=args.topic, max_offsets_per_trigger=args.max_offsets
    ).with_overrides(
        "paths", warehouse=str(work / "warehouse"), checkpoint=str(work / "checkpoint")
    )
    batches = _Batches()
    logging.getLogger("routelake.route_state").addHandler(batches)
    logging.getLogger("routelake.route_state").setLevel(logging.INFO)
    spark = build_spark(job, "steady-bench")  # run_route_state gets this session
    listener = _listener(batches)
    spark.streams.addListener(listener)
    started = time.monotonic()
    try:
        run_route_state(job, available_now=True, install_signal_handlers=False)
    finally:
        spark.streams.removeListener(listener)
    wall = time.monotonic() - started
    time.sleep(1)  # the listener is asynchronous
    rows = [dict(batch=b, **r) for b, r in sorted(batches.batches.items()) if "seconds" in r]
    first = min((r["watermark"] for r in rows if r["watermark"] > 0), default=0)
    for r in rows:
        r["event_s"] = (r["watermark"] - first) / 1000 if r["watermark"] > 0 else 0.0
        print(
            f"batch {r['batch']:3d} wm +{r['event_s']:6.1f} s: {r['seconds']:6.2f} s "
            f"(step {r.get('step', 0):.2f}, tables {r.get('tables', 0):.2f}, "
            f"progress {r.get('progress', 0):.2f}) input {r['input']} "
            f"state update {r.get('state_update_ms', 0)} ms commit {r.get('state_commit_ms', 0)} ms"
        )
    steady = [r for r in rows if r["event_s"] >= args.skip_s]
    stages = _stage_times(event_log, {r["batch"] for r in steady})
    for batch, lines in sorted(stages.items()):
        print(f"batch {batch}:\n  " + "\n  ".join(lines))
    if steady:
        keys = ["seconds", "step", "tables", "progress", "input"]
        medians = {k: statistics.median(r.get(k, 0) for r in steady) for k in keys}
        print(
            f"steady ({len(steady)} batches past {args.skip_s:.0f} s of event time), medians: "
            + ", ".join(f"{k} {v:.2f}" for k, v in medians.items())
        )
    print(f"whole drain: {len(rows)} batches in {wall:.1f} s")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--brokers", type=int, default=300)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--duration", type=float, default=150, help="seconds of event time")
    p.add_argument("--fault-interval-ms", type=int, default=20_000)
    p = sub.add_parser("run")
    p.add_argument("--topic", required=True)
    p.add_argument("--max-offsets", type=int, default=500)
    p.add_argument("--skip-s", type=float, default=60, help="event time left out of the medians")
    p.add_argument("--workdir", default=".work/bench-steady")
    p.add_argument("--keep", action="store_true", help="keep the warehouse and checkpoint")
    args = parser.parse_args()

    from routing_lib.config import load_config

    config = load_config()
    (produce if args.what == "produce" else run)(args, config)


if __name__ == "__main__":
    main()
