#!/usr/bin/env bash
# How long one exactly-once worker takes to own all 120 task partitions of a fresh local broker
# (from its start, Python and torch import included). For the one-at-a-time baseline, run it
# with PYTHONPATH pointing at a copy of src/ whose ownership.TAKE_AT_ONCE is 1.
cd "$(dirname "$0")/../.."
D=$(mktemp -d /tmp/k120.XXXX)
BS=$(.venv/bin/python ops/kafka/cluster start --brokers 1 --dir $D --port auto | tail -1)
echo "bootstrap $BS"
export INFERSTREAM_BOOTSTRAP_SERVERS=$BS INFERSTREAM_TOPIC_PREFIX=s120.
.venv/bin/python -m inferstream topics create >/dev/null
start=$(date +%s.%N)
.venv/bin/python -m inferstream worker --model sim:ms=1 --worker-id w120 --sysinfo-interval 0 > $D/worker.log 2>&1 &
W=$!
for i in $(seq 1 600); do
  if grep -q "assigned partitions=\[0, 1" $D/worker.log && grep "assigned partitions" $D/worker.log | tail -1 | grep -q " 119\]"; then break; fi
  sleep 0.2
done
end=$(date +%s.%N)
echo "owned 120 partitions after $(echo "$end - $start" | bc) s"
kill -TERM $W; wait $W || true
.venv/bin/python ops/kafka/cluster stop --dir $D >/dev/null
