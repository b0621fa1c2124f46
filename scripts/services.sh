#!/usr/bin/env bash
# Makes sure the local services the tests use are up. Starts each one that
# is installed but stopped (docs/testing.md, "The services");
# fails when a service is missing and CI=true.
set -u

wait_port() { # host port seconds
  local i=0
  while :; do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    ((i++ >= $3 * 10)) && return 1
    sleep 0.1
  done
}

missing=()
ensure() { # name port start-command...
  local name=$1 port=$2
  shift 2
  if wait_port 127.0.0.1 "$port" 0; then return 0; fi
  echo "services: $name is not listening on $port; starting it" >&2
  if ! command -v "${1%% *}" >/dev/null 2>&1 && [ ! -x "${1%% *}" ]; then
    missing+=("$name"); return 0
  fi
  (eval "$@") >/dev/null 2>&1 || true
  wait_port 127.0.0.1 "$port" 60 || missing+=("$name")
}

ensure postgresql 5432 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'
# WAL mode (docs/concepts.md) streams a logical replication slot: the
# cluster needs wal_level = logical, room for the tests' slots and
# walsenders, and replication connections from loopback. The parallel
# tests (relays with a lock claim per route of a fanned-out type, each
# batch in flight holding a connection) need more than the default 100
# connections. Set them once and restart PostgreSQL once; later runs find
# them set and restart nothing.
pg_logical() {
  command -v psql >/dev/null 2>&1 || return 0
  local level conns
  level=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc 'show wal_level' 2>/dev/null) || return 0
  conns=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc 'show max_connections' 2>/dev/null) || conns=0
  local ver conf hba
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  [ -n "$ver" ] || return 0
  conf=/etc/postgresql/$ver/main/conf.d/95-txbox-wal.conf
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  local restart=0
  if [ "$level" != logical ] || [ ! -f "$conf" ] || [ "${conns:-0}" -lt 300 ]; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "# written by txbox scripts/services.sh: WAL mode tests, parallel tests' connections" \
      "wal_level = logical" "max_replication_slots = 64" "max_wal_senders = 64" "max_connections = 300" > "$conf"
    restart=1
  fi
  if [ -f "$hba" ] && ! grep -Eq '^host[[:space:]]+replication[[:space:]]+all[[:space:]]+127\.0\.0\.1/32' "$hba"; then
    printf '%s\n' "host replication all 127.0.0.1/32 trust" "host replication all ::1/128 trust" "local replication all trust" >> "$hba"
    [ $restart = 1 ] || psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select pg_reload_conf()' >/dev/null 2>&1
  fi
  if [ $restart = 1 ]; then
    echo "services: setting wal_level = logical and max_connections = 300; restarting PostgreSQL once" >&2
    pg_ctlcluster --skip-systemctl-redirect "$ver" main restart >/dev/null 2>&1 || true
    wait_port 127.0.0.1 5432 60 || missing+=("postgresql (restart for wal_level)")
    level=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc 'show wal_level' 2>/dev/null)
    [ "$level" = logical ] || missing+=("postgresql wal_level=logical (is $level)")
    conns=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc 'show max_connections' 2>/dev/null)
    [ "${conns:-0}" -ge 300 ] || missing+=("postgresql max_connections >= 300 (is $conns)")
  fi
}
pg_logical
# A test run killed before its clean-up leaves its slot behind, and a slot
# keeps WAL for ever. Drop the test database's idle txbox slots whose
# schema is gone (a slot is named <schema>_txbox_slot by default).
pg_stale_slots() {
  command -v psql >/dev/null 2>&1 || return 0
  psql -h 127.0.0.1 -U postgres -d test -Atc "
    SELECT pg_drop_replication_slot(s.slot_name) FROM pg_replication_slots s
    WHERE s.database = 'test' AND NOT s.active AND s.slot_name LIKE '%\_txbox\_slot'
      AND NOT EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname || '_txbox_slot' = s.slot_name)" >/dev/null 2>&1 || true
}
pg_stale_slots
ensure mariadb 3306 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd'
ensure redis 6379 'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log'
ensure rabbitmq 5672 'rabbitmq-server -detached'
ensure nats 4222 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log'

# The dashboard's end-to-end test (admin/e2e_test.go) drives Debian's
# Chromium with playwright-core from npm (admin/e2e/package-lock.json).
if [ ! -x /usr/bin/chromium ]; then
  echo "services: /usr/bin/chromium is missing; installing it" >&2
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } >/dev/null 2>&1
  fi
  [ -x /usr/bin/chromium ] || missing+=("chromium")
fi
e2e="$(cd "$(dirname "$0")/.." && pwd)/admin/e2e"
if [ ! -f "$e2e/node_modules/.package-lock.json" ] || [ "$e2e/package-lock.json" -nt "$e2e/node_modules/.package-lock.json" ]; then
  echo "services: installing admin/e2e's npm packages" >&2
  if command -v npm >/dev/null 2>&1; then
    (cd "$e2e" && npm ci --no-audit --no-fund) >/dev/null 2>&1 || missing+=("playwright-core (npm ci in admin/e2e)")
  else
    missing+=("node/npm")
  fi
fi

# PostgreSQL 14, 16, 17 and 18 for the version matrix and the failover
# tests (internal/pgcluster) come from the npm registry, run by their own
# user.
"$(dirname "$0")/pg-versions.sh" || missing+=("postgresql 14/16/17/18 (scripts/pg-versions.sh)")

if [ ${#missing[@]} -gt 0 ]; then
  echo "services: not available: ${missing[*]}" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi
exit 0
