#!/usr/bin/env bash
# Run a command with PostgreSQL and Redis reachable, starting throwaway ones only where none is.
#
#   deploy/dev/with-services.sh make test-all
#
# For each of PostgreSQL (127.0.0.1:$LOOM_PG_PORT, default 5432) and Redis (127.0.0.1:$LOOM_REDIS_PORT,
# default 6379): if something already answers there, it is used as it is. Otherwise a throwaway
# server is started on that port with its data in a temporary directory (PostgreSQL: trust auth,
# user `postgres`; Redis: no persistence), after installing the server package from Debian's
# registry when it is missing and we are root. What this script started, it stops and deletes when
# the command ends, however it ends. Nothing else is touched.
set -euo pipefail

PG_PORT="${LOOM_PG_PORT:-5432}"
REDIS_PORT="${LOOM_REDIS_PORT:-6379}"
STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/loom-test-services.XXXXXX")"
chmod 755 "$STATE_DIR"
STARTED_PG=""
STARTED_REDIS=""

say() { echo "with-services: $*" >&2; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_until() {  # wait_until SECONDS COMMAND...
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    if ((SECONDS >= deadline)); then return 1; fi
    sleep 0.2
  done
}

apt_install() {  # apt_install PACKAGE...: only as root with apt-get; says so otherwise
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "cannot install $* (not root or no apt-get): install it, or start the server yourself"
    return 1
  fi
  say "installing $* from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

pg_bindir() {
  local initdb
  initdb="$(command -v initdb || true)"
  if [ -z "$initdb" ]; then
    initdb="$(ls -1 /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)"
  fi
  [ -n "$initdb" ] && dirname "$initdb"
}

as_pg_owner() {  # PostgreSQL refuses to run as root: run it as the `postgres` user then
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start_postgres() {
  local bindir data="$STATE_DIR/pg"
  bindir="$(pg_bindir)" || true
  if [ -z "$bindir" ]; then
    apt_install postgresql
    bindir="$(pg_bindir)"
  fi
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres "$data"
  as_pg_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >"$STATE_DIR/initdb.log"
  as_pg_owner "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $data -c fsync=off" start >/dev/null
  STARTED_PG="$bindir"
  say "started a throwaway PostgreSQL on 127.0.0.1:$PG_PORT ($data)"
}

start_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly no --dir "$STATE_DIR" --pidfile "$STATE_DIR/redis.pid" \
    --logfile "$STATE_DIR/redis.log"
  wait_until 30 listening "$REDIS_PORT"
  STARTED_REDIS=1
  say "started a throwaway Redis on 127.0.0.1:$REDIS_PORT"
}

stop_started() {
  local status=$?
  if [ -n "$STARTED_REDIS" ] && [ -f "$STATE_DIR/redis.pid" ]; then
    kill "$(cat "$STATE_DIR/redis.pid")" 2>/dev/null || true
    say "stopped the throwaway Redis"
  fi
  if [ -n "$STARTED_PG" ]; then
    as_pg_owner "$STARTED_PG/pg_ctl" -D "$STATE_DIR/pg" -m immediate -w stop >/dev/null 2>&1 || true
    say "stopped the throwaway PostgreSQL"
  fi
  rm -rf "$STATE_DIR"
  exit "$status"
}
trap stop_started EXIT
trap 'exit 130' INT TERM

listening "$PG_PORT" || start_postgres
listening "$REDIS_PORT" || start_redis
"$@"
