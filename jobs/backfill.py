"""spark-submit entry point: `spark-submit jobs/backfill.py --input PATH... --warehouse DIR`.

Same code path as `routectl backfill` (routing_lib/jobs/backfill.py); from an installed package
use `spark-submit "$(routectl job-path backfill)"` instead.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing_lib.cli import run_job

if __name__ == "__main__":
    run_job("backfill")
