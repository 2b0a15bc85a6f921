#!/usr/bin/env bash
# The long fuzz run, by hand: every target of tests/fuzz/targets.py under atheris for SECONDS
# each (default 85: about 10 minutes for the seven), one after another, at nice 19.
#   scripts/fuzz.sh [SECONDS]            TARGETS="event_json lookup_http" scripts/fuzz.sh 300
# New inputs collect in .work/fuzz/TARGET (kept between runs: a second run starts from them),
# crashes in .work/fuzz/artifacts. Prints per target: executions, seconds, corpus files and
# crashes. A crash stops its target's run: add the input under tests/fuzz/regressions/TARGET/,
# fix, run again. The test command runs each target briefly (tests/fuzz/test_fuzz.py).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-85}
targets=${TARGETS:-remoting_frames lookup_requests collector_requests event_json lookup_http console_http content_refs}
out=.work/fuzz
mkdir -p "$out/artifacts"
failed=0
printf '%-20s %12s %8s %8s %8s\n' target executions seconds corpus crashes
for target in $targets; do
    mkdir -p "$out/$target"
    started=$(date +%s)
    nice -n 19 .venv/bin/python -m tests.fuzz.run "$target" -max_total_time="$seconds" \
        -artifact_prefix="$out/artifacts/$target-" "$out/$target" "tests/fuzz/corpus/$target" \
        >"$out/$target.log" 2>&1
    status=$?
    elapsed=$(($(date +%s) - started))
    runs=$(grep -oE 'Done [0-9]+ runs' "$out/$target.log" | grep -oE '[0-9]+' || true)
    if [ -z "$runs" ]; then # stopped by a crash: the last status line has the count
        runs=$(grep -oE '^#[0-9]+' "$out/$target.log" | tail -1 | tr -d '#')
    fi
    crashes=$(find "$out/artifacts" -name "$target-*" | wc -l)
    printf '%-20s %12s %8s %8s %8s\n' "$target" "${runs:-?}" "$elapsed" \
        "$(find "$out/$target" -type f | wc -l)" "$crashes"
    if [ "$status" -ne 0 ]; then
        failed=1
        echo "  $target exited $status: see $out/$target.log" >&2
    fi
done
exit $failed
