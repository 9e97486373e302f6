#!/usr/bin/env bash
# DDP overlap where bandwidth is the bottleneck (root only): two network namespaces joined by a
# veth pair, both ends shaped to each rate of $RATES with tc tbf, one `overlap worker` rank in each
# (Gloo over the link, one
# OpenMP thread per rank). Each worker runs, for every bucket cap of $BUCKETS (MB), the model's
# forward + backward with the Reducer's overlap off and on, $STEPS timed steps each, then the same
# buckets all-reduced alone (no compute) $ALONE times. $EDGES lists the Reducer's edge bucket caps
# to compare (MB; 0: no edge buckets, the layout before them; 0.25: the default), $LAYOUTS the
# bucket layouts (timed: `--timed-buckets`, cut by the second step's times; bytes: arrival
# order and the cap only, the default). $WARMUP untimed steps (2: the timed
# layout is made after the second). Repeats the whole sweep $REPS times, the rates in a rotated
# order each time and the edge and layout settings alternating, so machine load hits every setting
# alike. Writes
#   $OUT/edge<E>_<layout>/<rate>/rep<k>/{timeline,alone,profile_w2}.csv, trace_cap<C>.json (rank 0)
#   and timeline_rank1.csv,
# then `overlap bandwidth` summarises each edge setting: medians and spread over the repetitions,
# overlap efficiency, the simulator calibrated on $CALIBRATE and its predictions for the other
# rates, and the plots (into $PLOTS/edge<E>_<layout> when set). Removes the namespaces it made, also when
# interrupted.
# A setting of $RATES may carry a one-way delay, RATE+DELAYms (e.g. 1gbit+0.2ms). Then every
# setting of the sweep runs over the user-space link emulator instead (build/linkem: two TAP
# devices, rate and delay in both directions; this kernel has no netem), so that all of them share
# one kind of link; EMULATE=1 asks for it without delays.
#   sudo bench/dist/overlap_bandwidth.sh            # defaults below; about 25 minutes here
#   sudo RATES="1gbit 500mbit" BUCKETS=4,8,25 EDGES=0.25 LAYOUTS="bytes timed" bench/dist/overlap_bandwidth.sh
set -u
RATES=${RATES:-"1gbit 500mbit 200mbit 100mbit"}
BUCKETS=${BUCKETS:-1,2,4,8,25}
REPS=${REPS:-3}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2}
ALONE=${ALONE:-5}
MODEL=${MODEL:-yolov5n}
IMG=${IMG:-128}
BATCH=${BATCH:-2}
CALIBRATE=${CALIBRATE:-1gbit}
EDGES=${EDGES:-"0.25"}
LAYOUTS=${LAYOUTS:-"bytes timed"}
OUT=${OUT:-overlap_bandwidth_out}
BURST_MIN=${BURST_MIN:-131072}  # bytes: tbf must hold a 64 KB GSO packet (docs/history/distributed.md)
PLOTS=${PLOTS:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
overlap=${OVERLAP:-$root/build/overlap}
[[ $(id -u) == 0 ]] || { echo "overlap_bandwidth.sh: needs root (ip netns, tc)"; exit 1; }
[[ -x $overlap ]] || { echo "overlap_bandwidth.sh: no $overlap; build the 'overlap' target first"; exit 1; }
EMULATE=${EMULATE:-0}
[[ $RATES == *+* ]] && EMULATE=1
linkem=${LINKEM:-$root/build/linkem}
[[ $EMULATE == 0 || -x $linkem ]] || { echo "overlap_bandwidth.sh: no $linkem; build the 'linkem' target first"; exit 1; }
a=kov$$a b=kov$$b emulator=
stop_emulator() { [[ -n $emulator ]] && kill "$emulator" 2>/dev/null && wait "$emulator" 2>/dev/null; emulator=; }
cleanup() { stop_emulator; ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$a" && ip netns add "$b" || exit 1

start_emulator() {  # rate, one-way delay in ms: a linkem between the namespaces' TAP devices
  stop_emulator
  local ready="$OUT/.linkem-ready"
  mkdir -p "$OUT"; rm -f "$ready"
  "$linkem" --a "$a:v$a" --b "$b:v$b" --rate "$1" --delay-ms "$2" --ready "$ready" >>"$OUT/linkem.log" 2>&1 &
  emulator=$!
  for _ in $(seq 100); do [[ -e $ready ]] && return 0; kill -0 "$emulator" 2>/dev/null || break; sleep 0.05; done
  echo "overlap_bandwidth.sh: linkem did not start; see $OUT/linkem.log"; tail -n 3 "$OUT/linkem.log"; exit 1
}

if [[ $EMULATE == 1 ]]; then
  start_emulator 1gbit 0  # makes the persistent TAP devices, which keep their addresses from here on
else
  ip link add "v$a" type veth peer name "v$b" || exit 1
  ip link set "v$a" netns "$a"; ip link set "v$b" netns "$b"
fi
ip -n "$a" addr add 10.213.8.1/24 dev "v$a"; ip -n "$b" addr add 10.213.8.2/24 dev "v$b"
for n in "$a" "$b"; do ip -n "$n" link set lo up; ip -n "$n" link set "v$n" up; done

shape() {  # RATE or RATE+DELAYms. tbf's burst: at least 1 ms of tokens at the rate (tbf needs >= rate/HZ), $BURST_MIN minimum
  local rate=${1%%+*} delay=0 bits burst
  [[ $1 == *+* ]] && { delay=${1#*+}; delay=${delay%ms}; }
  if [[ $EMULATE == 1 ]]; then start_emulator "$rate" "$delay"; return; fi
  bits=${rate%bit}; bits=$(numfmt --from=si "${bits^^}") || exit 1
  burst=$(( bits / 8 / 1000 > BURST_MIN ? bits / 8 / 1000 : BURST_MIN ))
  for n in "$a" "$b"; do
    tc -n "$n" qdisc replace dev "v$n" root tbf rate "$rate" burst "$burst" latency 100ms || exit 1
  done
}

run() {  # rate, repetition, "edge bucket cap:layout"
  local edge=${3%%:*} layout=${3##*:}
  local dir="$OUT/edge${edge}_$layout/$1/rep$2" port=$((29800 + RANDOM % 150)) p0 p1 e0 e1
  rm -rf "$dir"; mkdir -p "$dir"
  local args=(worker --model "$MODEL" --img-size "$IMG" --batch-size "$BATCH" --steps "$STEPS" --warmup "$WARMUP"
              --buckets "$BUCKETS" --alone-reps "$ALONE" --edge-bucket-mb "$edge" --bucket-layout "$layout"
              --out "$dir")
  for r in 0 1; do
    local ns=$a; [[ $r == 1 ]] && ns=$b
    (cd "$root" && ip netns exec "$ns" env OMP_NUM_THREADS=1 RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
       MASTER_ADDR=10.213.8.1 MASTER_PORT=$port "$overlap" "${args[@]}" >"$dir/rank$r.log" 2>&1) &
    if [[ $r == 0 ]]; then p0=$!; else p1=$!; fi
  done
  wait "$p0"; e0=$?; wait "$p1"; e1=$?
  if [[ $e0 != 0 || $e1 != 0 ]]; then
    echo "rate $1, repetition $2, edge $edge MB, $layout layout: failed ($e0, $e1)"
    tail -n 3 "$dir/rank0.log" "$dir/rank1.log"; exit 1
  fi
  echo "rate $1, repetition $2, edge $edge MB, $layout layout: done ($(date +%T))"
}

read -r -a rates <<<"$RATES"
read -r -a edges <<<"$EDGES"
read -r -a layouts <<<"$LAYOUTS"
settings=()
for e in "${edges[@]}"; do for l in "${layouts[@]}"; do settings+=("$e:$l"); done; done
for rep in $(seq "$REPS"); do
  for i in "${!rates[@]}"; do
    rate=${rates[$(( (i + rep - 1) % ${#rates[@]} ))]}
    shape "$rate"
    for j in "${!settings[@]}"; do run "$rate" "$rep" "${settings[$(( (j + rep + i) % ${#settings[@]} ))]}"; done
  done
done
for s in "${settings[@]}"; do
  e=${s%%:*} l=${s##*:}
  echo; echo "## edge buckets $e MB, $l layout"; echo
  "$overlap" bandwidth --runs "$OUT/edge${e}_$l" --calibrate "$CALIBRATE" --edge-bucket-mb "$e" --bucket-layout "$l" \
    ${PLOTS:+--plots "$PLOTS/edge${e}_$l"}
done
