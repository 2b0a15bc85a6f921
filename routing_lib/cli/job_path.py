"""`routectl job-path JOB`: the installed entry file of a job, for spark-submit (works from a
wheel too)."""

from __future__ import annotations

import argparse

from routing_lib import jobs
from routing_lib.config import Config

HELP = "path of a job's entry file, for spark-submit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", choices=jobs.JOBS)


def handle(args: argparse.Namespace, config: Config) -> int:
    print(jobs.entry_file(args.job))
    return 0
