"""The command line of the streaming job as the tests start it (`routectl run`), built once."""

from __future__ import annotations

from pathlib import Path


def run_args(
    kafka: str, topic: str, warehouse: str | Path, checkpoint: str | Path, *extra: str
) -> list[str]:
    """`routectl run`'s arguments: the job reading `topic` of `kafka` into `warehouse` from
    `checkpoint`, then `extra` options (--trigger-interval, --metrics-port, -v, ...)."""
    return [
        "run",
        "--kafka",
        kafka,
        "--topic",
        topic,
        "--warehouse",
        str(warehouse),
        "--checkpoint",
        str(checkpoint),
        *extra,
    ]
