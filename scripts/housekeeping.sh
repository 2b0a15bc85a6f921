#!/usr/bin/env bash
# Compact (OPTIMIZE) and VACUUM every Delta table of a routelake warehouse with delta-rs (no
# JVM). Stop the streaming job first, or run between `routectl run --available-now` runs: see
# docs/housekeeping.md.
#   scripts/housekeeping.sh [--warehouse DIR] [--vacuum-hours H] [--dry-run]
#                           [--disable-retention-check] [--lite] [--since DAY] [--before DAY]
#                           [--table T]...
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  echo "error: $python not found (run scripts/setup.sh first)" >&2
  exit 1
fi
exec "$python" -m routing_lib.housekeeping "$@"
