#!/usr/bin/env bash
# Step time of 2-node `kestrel train --grad-compress none|fp16|bf16` over a link of limited
# bandwidth (root only). Two network namespaces joined by a veth pair shaped to $RATE each way
# (tc tbf; RATE=none leaves it unshaped), one rank in each, yolov5n at 128 pixels, 2 images per
# rank, one OpenMP thread per rank, 16 batches. Prints, per run, the medians over steps 3-12 of
# rank 0's --trace: step (interval between backward starts), backward, and "wait for gradients"
# (the all-reduce left exposed after backward). The three settings alternate, $REPS times.
# Removes the namespaces it made, also when interrupted. docs/distributed.md has a table.
set -u
RATE=${RATE:-200mbit}
REPS=${REPS:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
kestrel=${KESTREL:-$root/build/kestrel}
out=$(mktemp -d)
a=kgc$$a b=kgc$$b
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT INT TERM
ip netns add "$a" && ip netns add "$b" || exit 1
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"; ip link set "v$b" netns "$b"
ip -n "$a" addr add 10.213.7.1/24 dev "v$a"; ip -n "$b" addr add 10.213.7.2/24 dev "v$b"
for n in "$a" "$b"; do ip -n "$n" link set lo up; ip -n "$n" link set "v$n" up; done
if [[ $RATE != none ]]; then
  for n in "$a" "$b"; do tc -n "$n" qdisc add dev "v$n" root tbf rate "$RATE" burst 64kb latency 100ms; done
fi
run() {
  local c=$1 port=$((29700 + RANDOM % 200))
  local args=(train --cfg models/yolov5n.yaml --device cpu --img-size 128 --epochs 1 --workers 1
              --max-batches 16 --noplots --noval --nosave --batch-size 4 --grad-compress "$c"
              --nnodes 2 --nproc-per-node 1 --master-addr 10.213.7.1 --master-port "$port"
              --project "$out/$c" --exist-ok --trace "$out/$c.trace")
  (cd "$root" && OMP_NUM_THREADS=1 ip netns exec "$a" "$kestrel" "${args[@]}" --node-rank 0 >"$out/$c.0.log" 2>&1) &
  local p0=$!
  (cd "$root" && OMP_NUM_THREADS=1 ip netns exec "$b" "$kestrel" "${args[@]}" --node-rank 1 >"$out/$c.1.log" 2>&1) &
  local p1=$!
  wait $p0; local e0=$?; wait $p1; local e1=$?
  if [[ $e0 != 0 || $e1 != 0 ]]; then echo "$c: failed"; tail -n 3 "$out/$c.0.log" "$out/$c.1.log"; return; fi
  python3 - "$out/$c.trace.rank0" "$c" <<'PY'
import json, statistics, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
backward = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "backward")
wait = [e["dur"] for e in events if e.get("name") == "wait for gradients"]
step = [b[0] - a[0] for a, b in zip(backward, backward[1:])][2:]
print(f"{sys.argv[2]}: step {statistics.median(step) / 1e3:.1f} ms, backward "
      f"{statistics.median(d for _, d in backward[3:]) / 1e3:.1f} ms, wait for gradients "
      f"{statistics.median(wait[3:]) / 1e3:.1f} ms")
PY
}
for rep in $(seq "$REPS"); do
  for c in none fp16 bf16; do echo "rate $RATE, repetition $rep, $(run "$c")"; done
done
