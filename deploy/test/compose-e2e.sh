#!/usr/bin/env bash
# End-to-end test of the seed's scenario with real containers, on the Docker
# engine of this machine:
#
#   1. builds the images (hangar:dev from this repo; a PostgreSQL 15 image
#      from the host's binaries, since no registry can be reached) and starts
#      docker-compose.yml with deploy/test/docker-compose.e2e.yml;
#   2. runs builds through `hangar execute` from the host;
#   3. removes the worker container running a build with `docker rm -f`,
#      removes its volume, and recreates it under the same name with an empty
#      work dir: the build is retried and succeeds, no `disappeared` error,
#      and web drops the old state's volume rows the moment it registers;
#   4. has the kernel OOM-kill a worker container (a task under the process
#      runtime allocates past the container's memory limit), restarts it on
#      its work dir: the build succeeds on the retry, and web's picture of the
#      worker matches its disk at once.
#
# Prints PASS/FAIL lines and a closing "N passed, M failed". Cleans up its
# containers, network and volumes on exit (the images stay, for reuse).
#
# Environment: CARGO_TARGET_DIR (where cargo builds), HANGAR_E2E_KEEP=1 to
# leave the cluster running for inspection.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Absolute: builds run from their own work dir.
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
hangar_bin="$target_dir/x86_64-unknown-linux-gnu/release/hangar"
project="hangare2e$$"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HANGAR_WEB_PORT=$port
export HANGAR_ADMIN_TOKEN=e2e-admin-token-0123456789
export HANGAR_WORKER_KEY=e2e-worker-key-0123456789
export POSTGRES_PASSWORD=e2e-postgres-password
export HANGAR_URL="http://127.0.0.1:$port"
export HANGAR_TOKEN=$HANGAR_ADMIN_TOKEN
unset HANGAR_IMAGE

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
else
  compose_cmd=(docker-compose)
fi
compose() { "${compose_cmd[@]}" -p "$project" -f docker-compose.yml -f deploy/test/docker-compose.e2e.yml "$@"; }

work=$(mktemp -d /tmp/hangar-e2e.XXXXXX)
passed=0
failed=0
pass() { echo "PASS: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() {
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
log() { echo "--- $*"; }

cleanup() {
  local rc=$?
  if [ "$failed" -gt 0 ] || [ "$rc" -ne 0 ]; then
    echo "--- last logs of the cluster"
    compose logs --no-color --tail 40 2>&1 | tail -200 || true
  fi
  if [ "${HANGAR_E2E_KEEP:-0}" = 1 ]; then
    echo "--- kept: ${compose_cmd[*]} -p $project -f docker-compose.yml -f deploy/test/docker-compose.e2e.yml ...; HANGAR_URL=$HANGAR_URL"
  else
    compose down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

hangar() { "$hangar_bin" "$@"; }

# Polls `cmd` every half second until it succeeds or `secs` pass.
wait_for() {
  local secs=$1
  shift
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

# One field of a worker from `hangar workers --json` (empty if unknown).
worker_field() {
  hangar workers --json | python3 -c '
import json, sys
for w in json.load(sys.stdin):
    if w["name"] == sys.argv[1]:
        print(w[sys.argv[2]])' "$1" "$2"
}
# Handles of the volume rows web has for a worker, one per line, with state.
volume_rows() {
  hangar volumes -w "$1" --json | python3 -c '
import json, sys
for v in json.load(sys.stdin):
    print(v["handle"], v["state"])'
}
container_of() { compose ps -q "$1"; }
# What the worker has on its disk: its state identity and its volume dirs.
disk_identity() { docker exec "$(container_of "$1")" cat /work/state-identity; }
disk_volumes() { docker exec "$(container_of "$1")" ls /work/volumes 2>/dev/null | grep -v '^\.' || true; }

running() { [ "$(worker_field "$1" state)" = running ]; }
registered_anew() { # NAME OLD_GENERATION
  local g
  g=$(worker_field "$1" generation)
  [ -n "$g" ] && [ "$g" -gt "$2" ] && running "$1"
}
no_disappeared() { ! grep -qi disappeared "$@"; }
has_event() { # NAME KIND (read whole: grep -q would close the pipe early)
  local events
  events=$(hangar events -w "$1" --json)
  grep -q "\"$2\"" <<<"$events"
}

# Every volume web counts as on the worker (`created`; rows being made or
# being destroyed are in flight) is on the worker's disk, and none of `old`
# (handles of a wiped state) is left in any state.
rows_match_disk() { # NAME [OLD_HANDLES_FILE]
  local rows disk
  rows=$(volume_rows "$1" | awk '$2 == "created" {print $1}' | sort)
  disk=$(disk_volumes "$1" | sort)
  if [ -n "$rows" ] && [ -n "$(comm -23 <(echo "$rows") <(echo "$disk"))" ]; then
    echo "created rows of $1 not on its disk: $(comm -23 <(echo "$rows") <(echo "$disk") | tr '\n' ' ')"
    volume_rows "$1" | sed 's/^/    row: /'
    echo "$disk" | sed 's/^/    disk: /'
    return 1
  fi
  if [ -n "${2:-}" ] && [ -s "$2" ]; then
    local stale
    stale=$(comm -12 <(volume_rows "$1" | awk '{print $1}' | sort) <(sort "$2"))
    if [ -n "$stale" ]; then
      echo "rows of the old state of $1 still there: $(echo "$stale" | tr '\n' ' ')"
      return 1
    fi
  fi
}

# ---------------------------------------------------------------- images
log "building images"
deploy/build-image.sh hangar:dev
deploy/test/build-postgres-image.sh hangar-test-postgres:15
[ -x "$hangar_bin" ] || { echo "no CLI at $hangar_bin" >&2; exit 1; }

# ---------------------------------------------------------------- tasks
mkdir -p "$work/src"
echo "an input line" > "$work/src/input.txt"
cat > "$work/build.yml" <<'EOF'
platform: linux
inputs: [{name: src}]
outputs: [{name: out}]
caches: [{path: cache}]
run:
  path: sh
  args:
  - -c
  - |
    cat src/input.txt
    if [ -f cache/seen ]; then echo "cache was warm"; else echo "cache was cold"; fi
    touch cache/seen
    echo "built on $HOSTNAME" > out/result.txt
EOF
# No uploaded input: what `hangar execute` uploads lives on one worker only,
# so a step whose input was on the wiped worker cannot be retried anywhere.
cat > "$work/slow.yml" <<'EOF'
platform: linux
caches: [{path: cache}]
run:
  path: sh
  args: [-c, "echo begun; sleep 8; touch cache/slow; echo finished"]
EOF
# Under the process runtime the task runs inside the worker container and
# shares its memory limit. On cgroup v1 the kernel kills the biggest process
# of the cgroup, which would be the task; Kubernetes on cgroup v2 kills the
# whole container (memory.oom.group). Raising the worker's oom_score_adj makes
# the kernel pick the worker here too; the test does that from outside (a task
# runs as its own user and cannot touch the worker's process), and the task,
# which inherits the raised score, sets its own back to 0. The marker (in
# the container's own filesystem, which a restart keeps) lets the retry
# succeed.
cat > "$work/oom.yml" <<'EOF'
platform: linux
run:
  path: sh
  args:
  - -c
  - |
    if [ ! -e /tmp/hangar-e2e-oom-once ]; then
      touch /tmp/hangar-e2e-oom-once
      echo "allocating past the worker container's memory limit"
      # The worker's raised score was inherited: give it back (raising and
      # restoring one's own needs no privilege) so the worker is the choice.
      echo 0 > /proc/self/oom_score_adj
      x=$(head -c 1000000000 /dev/zero | tr '\0' a)
      echo "still alive after allocating ${#x} bytes"
      exit 1
    fi
    echo "the retry ran on the restarted worker"
EOF
run_build() { # LOGFILE TASK [ARGS...] (a build that has not ended in 3 minutes fails)
  local out=$1 task=$2
  shift 2
  if (cd "$work" && timeout 180 "$hangar_bin" execute -c "$task" "$@") >"$out" 2>&1; then
    return 0
  fi
  echo "--- $out (last lines)"
  tail -n 15 "$out"
  return 1
}

# ---------------------------------------------------------------- cluster
log "starting the cluster (project $project, web on 127.0.0.1:$port)"
compose up -d
check "web answers /api/v1/info" wait_for 120 curl -fsS "$HANGAR_URL/api/v1/info"
both_running() { running worker-1 && running worker-2; }
check "both workers run" wait_for 60 both_running
for w in worker-1 worker-2; do
  check "$w: web's state identity is the one on its disk" \
    test "$(worker_field $w state_identity)" = "$(disk_identity $w)"
done

log "builds on the fresh cluster"
for i in 1 2 3 4; do
  check "build $i succeeds" run_build "$work/build-$i.log" build.yml -i src=src -o out=out
done

# ------------------------------------------- removed and recreated, wiped
log "a worker removed with docker rm -f while it runs a build, recreated with an empty work dir"
run_build "$work/slow.log" slow.yml &
slow=$!
build_id=""
step_worker() {
  build_id=$(sed -n 's/^hangar: executing build \([0-9]*\).*/\1/p' "$work/slow.log")
  [ -n "$build_id" ] || return 1
  curl -fsS -H "Authorization: Bearer $HANGAR_TOKEN" "$HANGAR_URL/api/v1/builds/$build_id" |
    python3 -c 'import json, sys; s = json.load(sys.stdin)["steps"]; w = s[-1]["worker"] if s else None; print(w or ""); sys.exit(0 if w else 1)'
}
wait_for 60 step_worker
victim=$(step_worker)
while ! grep -q begun "$work/slow.log" && kill -0 $slow 2>/dev/null; do sleep 0.2; done
check "the slow build runs on $victim" grep -q begun "$work/slow.log"
old_identity=$(worker_field "$victim" state_identity)
old_generation=$(worker_field "$victim" generation)
volume_rows "$victim" | awk '{print $1}' > "$work/old-handles"
old_container=$(container_of "$victim")
old_name=$(docker inspect -f '{{.Name}}' "$old_container")
echo "$victim: identity ${old_identity:0:8}, generation $old_generation, $(wc -l < "$work/old-handles") volume row(s)"
volume=$(docker volume ls -q --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.volume=$victim-work")
docker rm -f "$old_container" >/dev/null
docker volume rm "$volume" >/dev/null
compose up -d --no-deps "$victim"
new_container=$(container_of "$victim")
check "$victim is recreated under the same name ($old_name)" \
  test "$(docker inspect -f '{{.Name}}' "$new_container")" = "$old_name" -a "$new_container" != "$old_container"
check "$victim registers again" wait_for 60 registered_anew "$victim" "$old_generation"
# Right after it registers: web's row is the new worker, and no volume row of
# the wiped state is left.
check "$victim: web has the new state identity, the one on its new disk" \
  test "$(worker_field "$victim" state_identity)" = "$(disk_identity "$victim")" -a "$(disk_identity "$victim")" != "$old_identity"
check "$victim: no volume row of the old state, every row on its disk" rows_match_disk "$victim" "$work/old-handles"
check "$victim: the registration is recorded as restarted-state-lost" has_event "$victim" restarted-state-lost
slow_rc=0
wait $slow || slow_rc=$?
check "the build running on the removed worker succeeds" test "$slow_rc" -eq 0
check "its output is complete" grep -q finished "$work/slow.log"
check "no 'disappeared' error in it" no_disappeared "$work/slow.log"
grep -E "retrying|stalled|restarted" "$work/slow.log" | sed 's/^/    /' || true
for i in 5 6 7 8; do
  check "build $i after the recreation succeeds" run_build "$work/build-$i.log" build.yml -i src=src -o out=out
done
check "no 'disappeared' error in any build" no_disappeared "$work"/build-*.log
check "$victim: rows still match its disk" rows_match_disk "$victim"

# ------------------------------------------------------------ OOM killed
log "worker-2 OOM-killed by the kernel, restarted on its work dir"
w2=$(container_of worker-2)
oom_identity=$(worker_field worker-2 state_identity)
oom_generation=$(worker_field worker-2 generation)
docker exec "$w2" sh -c 'echo 1000 > /proc/1/oom_score_adj'
run_build "$work/oom.log" oom.yml --tag small-memory &
oom=$!
exit_code=$(timeout 120 docker wait "$w2" || echo timeout)
check "the worker-2 container ended with exit code 137 (was $exit_code)" test "$exit_code" = 137
check "Docker says the kernel OOM-killed it" test "$(docker inspect -f '{{.State.OOMKilled}}' "$w2")" = true
docker start "$w2" >/dev/null
check "worker-2 registers again" wait_for 60 registered_anew worker-2 "$oom_generation"
check "worker-2 kept its state identity" test "$(worker_field worker-2 state_identity)" = "$oom_identity"
check "worker-2: every volume row is on its disk" rows_match_disk worker-2
check "worker-2: the registration is recorded as restarted-state-kept" has_event worker-2 restarted-state-kept
oom_rc=0
wait $oom || oom_rc=$?
check "the build whose task got the worker OOM-killed succeeds on the retry" test "$oom_rc" -eq 0
check "its retry ran on the restarted worker" grep -q "the retry ran on the restarted worker" "$work/oom.log"
check "no 'disappeared' error in it" no_disappeared "$work/oom.log"
grep -E "retrying|stalled|restarted" "$work/oom.log" | sed 's/^/    /' || true
for i in 9 10 11; do
  check "build $i after the OOM kill succeeds" run_build "$work/build-$i.log" build.yml -i src=src -o out=out
done
check "no 'disappeared' error in any build" no_disappeared "$work"/build-*.log

log "what the operator sees"
hangar workers | sed 's/^/    /'
hangar events --limit 8 | sed 's/^/    /'

if [ "$failed" -gt 0 ]; then
  for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done
fi
echo "compose-e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
