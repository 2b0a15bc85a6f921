"""spark-submit entry point of the streaming job: `spark-submit jobs/route_state.py [--config F]`.

Same code path as `routectl run`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing_lib.cli import entry  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["run"]
    entry()
