#!/usr/bin/env bash
# Local single-node Kafka (KRaft) for routelake: start | stop | status | topic.
#   scripts/kafka.sh start [--topic T] [--partitions N] [--no-topic] [--config FILE]
#   scripts/kafka.sh stop
#   scripts/kafka.sh status        # exit 0 when running, 3 when not
# Data, logs and the pid file live in [kafka] data_dir of conf/routelake.toml (.work/kafka).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  echo "error: $python not found (create the venv first)" >&2
  exit 1
fi
cd "$root"
exec "$python" -m routing_lib.cli kafka "$@"  # routectl kafka
