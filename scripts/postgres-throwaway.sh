#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on a free loopback port and prints the
# admin URL on stdout. The cluster lives in DIR (first argument); stop it with
# `scripts/postgres-throwaway.sh stop DIR`. PostgreSQL refuses to run as root,
# so when we are root the cluster runs as the `postgres` user.
set -euo pipefail

find_bin() {
  for d in /usr/lib/postgresql/*/bin /usr/local/pgsql/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
  return 1
}

BIN=$(find_bin) || { echo "error: PostgreSQL server binaries (pg_ctl, initdb) not found; install the postgresql package" >&2; exit 1; }

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

if [ "${1:-}" = stop ]; then
  dir=$2
  as_owner "$BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  exit 0
fi

dir=${1:?usage: postgres-throwaway.sh DIR | stop DIR}
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" postgres
  chown postgres "$dir"
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_owner "$BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
as_owner "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400 -c shared_buffers=128MB" start >/dev/null \
  || { cat "$dir/server.log" >&2; exit 1; }
echo "postgres://postgres@127.0.0.1:$port/postgres"
