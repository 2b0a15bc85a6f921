"""spark-submit entry point of the streaming job: `spark-submit jobs/route_state.py [--config F]`.

Same code path as `routectl run` (routing_lib/jobs/route_state.py); from an installed package
use `spark-submit "$(routectl job-path route_state)"` instead.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing_lib.cli import run_job

if __name__ == "__main__":
    run_job("route_state")
