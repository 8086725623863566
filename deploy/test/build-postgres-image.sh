#!/usr/bin/env bash
# Builds hangar-test-postgres:15, a stand-in for the registry's postgres:15
# made from this machine's PostgreSQL 15 (Debian's postgresql-15), for the
# end-to-end test on machines that cannot pull images. Users of
# docker-compose.yml pull the real postgres:15 and never need this.
#
# It copies the server binaries, their data files and every shared library
# they load (found with ldd) into a root filesystem with a static busybox for
# the entrypoint, and imports that as an image (ownership preserved). The
# entrypoint honours what the compose file uses of the official image:
# POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA, and `pg_isready`.
set -euo pipefail
tag=${1:-hangar-test-postgres:15}
pg=/usr/lib/postgresql/15
[ -x "$pg/bin/postgres" ] || { echo "need PostgreSQL 15 server binaries in $pg (apt-get install postgresql-15)" >&2; exit 1; }
busybox=/bin/busybox
readelf -lW "$busybox" 2>/dev/null | grep -q INTERP && { echo "$busybox is not static (apt-get install busybox-static)" >&2; exit 1; }

root=$(mktemp -d /tmp/hangar-pg-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root$pg/bin" "$root$pg/lib" "$root/usr/share/postgresql" "$root/usr/share" \
  "$root/bin" "$root/etc" "$root/tmp" "$root/var/lib/postgresql/data" "$root/var/run/postgresql" \
  "$root/usr/local/bin"
bins=(postgres initdb pg_ctl pg_isready psql)
for b in "${bins[@]}"; do cp -L "$pg/bin/$b" "$root$pg/bin/"; done
# Every module but the LLVM JIT (jit is off below; libLLVM alone is 100 MB).
find "$pg/lib" -maxdepth 1 -name '*.so' ! -name 'llvmjit*' -exec cp -L {} "$root$pg/lib/" \;
cp -a /usr/share/postgresql/15 "$root/usr/share/postgresql/"
cp -a /usr/share/zoneinfo "$root/usr/share/"

# Shared libraries, at the paths the dynamic loader looks in.
for f in "$root$pg/bin/"* "$root$pg/lib/"*.so; do
  ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^\s*\/lib.*ld-linux/ {print $1}'
done | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# Debian's usrmerge: /lib64 and /lib may be links on the host; the loader
# path must exist as named in the binaries.
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || { mkdir -p "$root/lib64"; cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"; }

cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\npostgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\npostgres:x:999:\n' > "$root/etc/group"
printf 'hosts: files dns\npasswd: files\ngroup: files\n' > "$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"

cat > "$root/usr/local/bin/docker-entrypoint.sh" <<'SH'
#!/bin/sh
# Initialises PGDATA on first start the way the official image does (for the
# parts hangar's compose file uses), then runs the server in the foreground.
set -e
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || { echo "POSTGRES_PASSWORD is required" >&2; exit 1; }
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\"" | postgres --single -D "$PGDATA" -j postgres >/dev/null
  fi
  echo "initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
if [ "$1" = postgres ]; then
  shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' -c jit=off "$@"
fi
exec "$@"
SH
chmod 755 "$root/usr/local/bin/docker-entrypoint.sh"
chown -R 999:999 "$root/var/lib/postgresql" "$root/var/run/postgresql"
chmod 700 "$root/var/lib/postgresql/data"

old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
tar -C "$root" -c . | docker import \
  --change 'USER 999:999' \
  --change 'ENV PATH=/usr/local/bin:/usr/lib/postgresql/15/bin:/bin' \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'WORKDIR /var/lib/postgresql' \
  --change 'EXPOSE 5432' \
  --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  - "$tag" >/dev/null
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $tag"
