#!/bin/bash
# The scaling model against a known network (docs/scaling.md, "Against a known network"): two emulated
# hosts, one rank each, at three links (RATES); per link:
#   1. bench allreduce across the hosts (calibrated on the link, --save-model), every algorithm, 4 B to 4 MiB;
#   2. model allreduce --check: every row against the link's figures (uncalibrated: the ping-pong latency
#      bench measured, the rate the link was shaped to) and against the calibration;
#   3. run digits_mlp_distributed -n 2 over MPI and over torch.distributed (gloo), each with its baseline;
#      model scaling --check of each against the link's figures and against the calibration.
# Then, on a machine with 4 cores or more, seed 002's latency/bandwidth crossover on four emulated hosts
# (recursive doubling against Rabenseifner). Needs root and iproute2. Run on a quiet machine:
#   sudo bash docs/results/emulated-links-2026-11-29/run.sh
# (about 20 minutes on 2 cores; RATES="100mbit" for one link; QUICK=1 for a 10-minute smoke run; BURST=125000
# when the 1 Gbit/s rows are far slower than the wire: see docs/hosts.md). Outputs land
# beside this script (OUT=DIR elsewhere); `grep -h 'within\|crossover\|exit' *.txt` sums them up.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE}
D5=${D5:-$(cd "$HERE/../../.." && pwd)/.venv/bin/deep500lite}
PY=$(dirname "$D5")/python
export PATH="$(dirname "$D5"):$PATH"
export OMP_NUM_THREADS=1
RATES=${RATES:-"100mbit 1gbit none"}
# BURST=BYTES sets every link's token bucket (emulate --burst); the default holds 100 us of traffic
EM=(--hosts 2); [ -n "${BURST:-}" ] && EM+=(--burst "$BURST")
EPOCHS=10; MAXB=4MiB; CROSS="100mbit 1gbit"
if [ "${QUICK:-0}" = 1 ]; then EPOCHS=2; MAXB=256KiB; CROSS=100mbit; QB="--max-time 0.1 --interleave 6"; else QB=""; fi
mkdir -p "$OUT" && cd "$OUT" || exit 1
log() { echo "$(date -u +%H:%M:%S) $*"; }
# The link's figures as model --network takes them: ALPHA_S,BANDWIDTH_B_PER_S. ALPHA is the ping-pong latency
# bench allreduce measured across the hosts (the kernel here has no netem to set one); BANDWIDTH is the rate the
# link was shaped to, or for an unshaped link the ping-pong's own bandwidth.
link() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))["model"]
rate = sys.argv[2]
units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
bw = 1 / model["beta"] if rate == "none" else float(rate[:-4]) * units[rate[-4:]] / 8
print(f"{model['alpha']:.4g},{bw:.4g}")
PY
}
{ echo "machine: $(lscpu | grep 'Model name' | sed 's/  */ /g'), $(getconf _NPROCESSORS_ONLN) CPUs; kernel $(uname -r)"
  echo "start: $(date -u) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > machine.txt
for rate in $RATES; do
  log "bench allreduce, 2 hosts, $rate"
  "$D5" emulate "${EM[@]}" --bandwidth "$rate" -- "$D5" bench allreduce -n 2 --min-bytes 4 --max-bytes $MAXB $QB \
    --save-model "ar-$rate.json" --json "bench-$rate.json" > "bench-$rate.txt" 2>&1
  echo "exit $?" >> "bench-$rate.txt"
  NET=$(link "bench-$rate.json" "$rate")
  echo "$NET" > "link-$rate.txt"
  # the link's figures hold no cost of the software or of TCP's start: judge them where the link's time is some
  # 50 times a 50 us call (256 KiB at 100 Mbit/s, 1 MiB at 1 Gbit/s, 4 MiB unshaped); every row is shown
  case $rate in 100mbit) FROM=256KiB ;; 1gbit) FROM=1MiB ;; *) FROM=4MiB ;; esac
  "$D5" model allreduce --check "bench-$rate.json" --network "$NET" --min-bytes $FROM \
    > "allreduce-link-$rate.txt" 2>&1
  echo "exit $?" >> "allreduce-link-$rate.txt"
  "$D5" model allreduce --check "bench-$rate.json" --allreduce-model "ar-$rate.json" --min-bytes 16KiB \
    > "allreduce-calibrated-$rate.txt" 2>&1
  echo "exit $?" >> "allreduce-calibrated-$rate.txt"
  for comm in mpi torch; do
    log "run -n 2 over $comm, $rate"
    rm -rf "/tmp/d5-emulated-run-$comm-$rate"
    "$D5" emulate "${EM[@]}" --bandwidth "$rate" -- "$D5" run digits_mlp_distributed -n 2 --set epochs=$EPOCHS \
      --set communicator=$comm --out "/tmp/d5-emulated-run-$comm-$rate" > "run-$comm-$rate.txt" 2>&1
    echo "exit $?" >> "run-$comm-$rate.txt"
    cp "/tmp/d5-emulated-run-$comm-$rate/results.json" "results-$comm-$rate.json"
    for model in link calibrated; do
      if [ $model = link ]; then M=(--network "$NET"); else M=(--allreduce-model "ar-$rate.json"); fi
      "$D5" model scaling digits_mlp_distributed --nodes 1,2 --weak --batch 32 "${M[@]}" --fusion-mb 1 \
        --no-overlap --accelerator this --step-from "results-$comm-$rate.json" --check "results-$comm-$rate.json" \
        --json "scaling-$comm-$model-$rate.json" > "scaling-$comm-$model-$rate.txt" 2>&1
      echo "exit $?" >> "scaling-$comm-$model-$rate.txt"
    done
  done
done
# Four ranks on fewer than four cores take turns on them (docs/scaling.md, Limits): the crossover needs 4 cores.
[ "$(getconf _NPROCESSORS_ONLN)" -ge 4 ] || { log "crossover skipped: $(getconf _NPROCESSORS_ONLN) cores, 4 needed"; CROSS=""; }
for rate in $CROSS; do
  log "crossover, 4 hosts, $rate"
  "$D5" emulate --hosts 4 --bandwidth "$rate" -- "$D5" bench allreduce -n 4 --min-bytes 256 --max-bytes 256KiB \
    --factor 2 --algorithms recursive_doubling,rabenseifner --no-calibrate $QB --json "cross-$rate.json" \
    > "cross-$rate.txt" 2>&1
  echo "exit $?" >> "cross-$rate.txt"
  "$D5" model allreduce --check "cross-$rate.json" --network "$(link "cross-$rate.json" "$rate")" \
    > "cross-model-$rate.txt" 2>&1
  echo "exit $?" >> "cross-model-$rate.txt"
done
echo "end: $(date -u) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> machine.txt
log "done: grep -h 'within\|crossover\|exit' $OUT/*.txt"
