#!/usr/bin/env bash
# Multi-host test: four network namespaces joined by veth pairs to a bridge, so the
# coordinator, the shard server and two workers each have their own address. The job runs
# with mutual TLS (a private CA from `troupe tls init`), one worker is killed with SIGKILL
# mid-run, the job finishes and reports the loss, and the same command started again
# rejoins. Exits 77 (CTest: skipped) when namespaces cannot be created here.
#   usage: multi_host.sh TROUPE_BIN
set -u
troupe=${1:?usage: multi_host.sh TROUPE_BIN}
tag=trp$$
hub=${tag}-hub
work=$(mktemp -d)
pids=()

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/*.err; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${tag}-"); do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
ip netns add "$hub" 2>/dev/null || skip "ip netns add is not permitted here"
ip -n "$hub" link add br0 type bridge && ip -n "$hub" link set br0 up || fail "cannot create the bridge"

hosts=(coord srv w0 w1)
for i in "${!hosts[@]}"; do
  ns=${tag}-${hosts[$i]}
  ip netns add "$ns" || fail "cannot create namespace $ns"
  ip -n "$hub" link add "v$i" type veth peer name eth0 netns "$ns" || fail "cannot create a veth pair"
  ip -n "$hub" link set "v$i" master br0 up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

"$troupe" tls init "$work/pki" --node coordinator --node server --node worker-0 --node worker-1 \
  --san IP:10.77.0.1 --san IP:10.77.0.2 --san IP:10.77.0.3 --san IP:10.77.0.4 2>/dev/null || fail "tls init failed"
tls() { echo "--tls-cert $work/pki/$1.pem --tls-key $work/pki/$1.pem --tls-ca $work/pki/ca.pem --secret-file $work/pki/job.secret"; }
common="--job-id netns-job"

run_in() {  # namespace name, log name, command...; sets last_pid
  local ns=$1 name=$2; shift 2
  ip netns exec "${tag}-$ns" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  last_pid=$!
  pids+=("$last_pid")
}
wait_for() {  # file, text, seconds
  for ((i = 0; i < $3 * 10; i++)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

run_in coord coordinator "$troupe" node --role coordinator --listen 10.77.0.1:7070 $common $(tls coordinator) \
  --dataset synthetic --train-samples 20000 --epochs 3 --workers 2 --servers 1 --mode sync \
  --simulate-compute 15 --batch-size 64
coord_pid=$last_pid
run_in srv server "$troupe" node --role server --listen 10.77.0.2:7071 --join 10.77.0.1:7070 $common $(tls server)
run_in w0 w0 "$troupe" node --role worker --join 10.77.0.1:7070 $common $(tls worker-0)
run_in w1 w1 "$troupe" node --role worker --join 10.77.0.1:7070 $common $(tls worker-1)
w1_pid=$last_pid

wait_for "$work/coordinator.err" "epoch 1/3" 120 || fail "the job did not reach its first epoch"
kill -9 "$w1_pid"; wait "$w1_pid" 2>/dev/null
wait_for "$work/coordinator.err" "is gone" 20 || fail "the coordinator did not notice the dead worker"
run_in w1 w1-again "$troupe" node --role worker --join 10.77.0.1:7070 $common $(tls worker-1)

for ((i = 0; i < 1800; i++)); do kill -0 "$coord_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$coord_pid" 2>/dev/null && fail "the job did not finish within 180 s"
wait "$coord_pid"; code=$?
[ "$code" -eq 0 ] || fail "the coordinator exited with $code"
grep -q '"workers_lost":1' "$work/coordinator.out" || fail "the result does not report the lost worker: $(cat "$work/coordinator.out")"
grep -q "rejoined" "$work/coordinator.err" || fail "the restarted worker did not rejoin"
grep -q "mutual TLS" "$work/coordinator.err" || fail "the coordinator did not use TLS"
echo "PASS: $(cat "$work/coordinator.out")"
