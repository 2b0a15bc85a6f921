#!/usr/bin/env bash
# The embedded local default: set-up if needed, then local Kafka + simulated fleet + streaming
# job + lookup service, printing live routes. Ctrl-C stops everything. Arguments go to
# `routectl demo` (e.g. --brokers 10 --duration 120).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/routectl demo "$@"
