"""spark-submit entry point: `spark-submit jobs/backfill.py --input PATH... --warehouse DIR`.

Same code path as `routectl backfill`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing_lib.cli import entry  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["backfill"]
    entry()
