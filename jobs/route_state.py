"""spark-submit entry point of the streaming job: `spark-submit jobs/route_state.py [--config F]`.

Same code path as `routectl run`; from an installed package use
`spark-submit "$(routectl job-path route_state)"` instead.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing_lib.jobs import run

if __name__ == "__main__":
    run("route_state")
