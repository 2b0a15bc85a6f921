"""A full disk under the warehouse and the checkpoint, mid-stream.

Both live on a small tmpfs; once the job has published some batches, a big file takes the
rest of the space and more events arrive. The job stops with an error that says the disk is
full and names the path; every Delta table still reads (delta-rs, the lookup) at its last
version; the lookup goes on serving that snapshot; once space is freed, a restart resumes from
the checkpoint and the tables end equal to the reference replay, nothing written twice.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from routing_lib.core.catalog import STORED_NAMES
from routing_lib.core.dump import project
from routing_lib.read.warehouse import load_snapshot
from tests.support.fault_support import (
    JobProcess,
    assert_matches_reference,
    caught_up,
    published,
    wait_for,
)
from tests.support.helpers import random_history
from tests.support.kafka_support import produce
from tests.support.lookup_support import ServerThread

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
TMPFS_MB = 96
DISK_FULL_LINE = re.compile(r"routectl run: disk full: no space left on device writing (\S+) \(")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A TMPFS_MB tmpfs mounted for the test (root only), unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path) -> Path:
    """A file taking every free byte of the file system."""
    filler = disk / "filler"
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    subprocess.run(["fallocate", "-l", str(free), str(filler)], check=True)
    stats = os.statvfs(disk)
    assert stats.f_bavail == 0, "the disk is not full"
    return filler


def fleet_lines(seed: int) -> list[bytes]:
    history = random_history(seed, random.Random(seed))
    return [json.dumps(e).encode() for e in history]


@pytest.mark.parametrize("checkpoint_on_it", [True, False], ids=["both", "warehouse-only"])
def test_full_disk_stops_the_job_clearly_and_a_restart_resumes(
    checkpoint_on_it, small_disk, kafka_bootstrap, topic, tmp_path
):
    """Both on the disk: Spark's checkpoint files are the first writes of a micro-batch, so
    they meet the full disk. The warehouse alone on it: the Delta commits of a batch whose
    checkpoint entries went in do (some tables of the batch may be in, others not)."""
    lines = fleet_lines(31)
    first, second, third = (
        lines[: len(lines) // 3],
        lines[len(lines) // 3 : 2 * len(lines) // 3],
        lines[2 * len(lines) // 3 :],
    )
    produce(kafka_bootstrap, topic, first)
    with JobProcess(
        kafka_bootstrap,
        topic,
        tmp_path,
        warehouse=small_disk / "warehouse",
        checkpoint=(small_disk if checkpoint_on_it else tmp_path) / "checkpoint",
    ) as job:
        warehouse = job.warehouse
        job.start()
        as_text = [line.decode() for line in first]
        job.wait_running_until(
            lambda: caught_up(warehouse, as_text), 600, "the first part to be published"
        )
        before = project(load_snapshot(warehouse).dump())
        versions = {t: DeltaTable(str(warehouse / t)).version() for t in STORED_NAMES}
        with ServerThread(warehouse) as lookup:
            http = httpx.Client(base_url=f"http://127.0.0.1:{lookup.service.http_port}")
            wait_for(lambda: http.get("/readyz").status_code == 200, 30, "the lookup")
            route_before = _a_route(http, before)

            filler = fill(small_disk)
            produce(kafka_bootstrap, topic, second)
            code = job.process.wait(300)
            output = job.log.read_text(errors="replace")
            assert code != 0
            said = [line for line in output.splitlines() if line.startswith("routectl run:")]
            assert said, output[-3000:]
            last = said[-1]
            named = DISK_FULL_LINE.match(last)
            assert named and named[1].startswith(str(small_disk)), last  # a path on the disk
            assert "MiB free" in last and "restart" in last

            # Every table still reads at a committed version, with delta-rs and the lookup.
            for table in STORED_NAMES:
                delta = DeltaTable(str(warehouse / table))
                assert delta.version() >= versions[table]
                delta.to_pyarrow_table()
            served = lookup.service.holder.current
            assert served is not None and served.index.watermark is not None
            assert http.get("/readyz").status_code == 200
            assert _a_route(http, before) == route_before  # the last snapshot, still served

            filler.unlink()
            produce(kafka_bootstrap, topic, third)
            job.start()
            everything = [line.decode() for line in lines]
            job.wait_running_until(
                lambda: caught_up(warehouse, everything), 600, "the restarted job"
            )
            wait_for(
                lambda: (
                    lookup.service.holder.current.index.watermark
                    == load_snapshot(warehouse).watermark
                ),
                30,
                "the lookup to serve the new snapshot",
            )
        assert_matches_reference(warehouse, everything)
        assert len(published(warehouse)) == len({r["batch_id"] for r in published(warehouse)})


def _a_route(http: httpx.Client, dump: dict) -> dict:
    """The route of the first topic of the snapshot as the lookup's HTTP API serves it, with
    the table versions and the watermark it comes from."""
    name = sorted(dump["topicQueueTable"])[0]
    answer = http.get(f"/topics/{name}/route")
    assert answer.status_code == 200, answer.text
    return answer.json()
