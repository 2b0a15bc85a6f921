#!/usr/bin/env bash
# Fetches the real RocketMQ Java tools (mqadmin = rocketmq-tools, the Java NameServer =
# rocketmq-namesrv and a broker = rocketmq-broker, 5.3.3, with their dependencies: ~134 jars,
# ~83 MB) from Maven Central into .jars/rocketmq/. Used by tests/test_mqadmin.py,
# tests/test_real_broker.py and bench/lookup_bench.py. Idempotent: does nothing when the jars
# for the pom's current content are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
pom=deploy/maven/rocketmq-tools/pom.xml
dest=.jars/rocketmq
stamp="$dest/.pom-sha1"
want=$(sha1sum "$pom" | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && compgen -G "$dest/rocketmq-tools-*.jar" >/dev/null \
   && compgen -G "$dest/rocketmq-namesrv-*.jar" >/dev/null \
   && compgen -G "$dest/rocketmq-broker-*.jar" >/dev/null; then
  echo "RocketMQ jars are current ($dest)"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp"
rm -rf "$dest"; mkdir -p "$dest"; cp "$tmp"/*.jar "$dest"/
echo "$want" > "$stamp"
echo "RocketMQ jars fetched: $(ls "$dest"/*.jar | wc -l) jars, $(du -sh "$dest" | cut -f1) in $dest"
