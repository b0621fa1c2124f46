#!/usr/bin/env bash
# The version matrix: runs the PostgreSQL store's tests (the conformance
# suite of store/storetest included, through store/postgres) on a fresh
# PostgreSQL 14, 16, 17 and 18 (internal/pgcluster: wal_level = logical,
# trust on loopback, replication included), one version after the other.
# The system server (PostgreSQL 15) runs them in every package's tests;
# `make test` runs a narrow matrix (the conformance suites and WAL mode's
# stream tests, PG_MATRIX_* set by the Makefile); `make pg-matrix` and
# `make chaos` run this with its defaults.
#
#   PG_MATRIX_VERSIONS  the versions, default "14 16 17 18"
#   PG_MATRIX_PKGS      the packages, default ./store/postgres/
#   PG_MATRIX_FLAGS     go test's flags, default "-race -count=1 -p 1 -timeout 30m"
#
# WAL mode needs PostgreSQL 15 (publication row filters): below it the
# tests that stream (PG_MATRIX_WAL_TESTS, a go test -skip pattern) are
# skipped, and store/postgres's TestOldestServer checks the refusal.
#
# Each server is internal/pgcluster/pgserve, whose standard input is a pipe
# from this script: however the script ends, the servers stop with it.
# Exit status: 0 when every version passed.
set -u
cd "$(dirname "$0")/.."
./scripts/pg-versions.sh || exit 1
versions=(${PG_MATRIX_VERSIONS:-14 16 17 18})
wal_tests=${PG_MATRIX_WAL_TESTS:-'^(TestStream|TestCreateStream|TestSpillPlans$|TestAdoptRefused$|TestFailoverOnSharedServer$)'}
pkgs=(${PG_MATRIX_PKGS:-./store/postgres/})
flags=(${PG_MATRIX_FLAGS:--race -count=1 -p 1 -timeout 30m})
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/pgserve" ./internal/pgcluster/pgserve || exit 1

fds=() pids=()
for v in "${versions[@]}"; do
  exec {fd}> >(exec "$tmp/pgserve" -version "$v" >"$tmp/url$v" 2>"$tmp/log$v")
  fds+=("$fd") pids+=("$!")
done
# stop_servers closes the servers' standard input and waits for them to
# stop and remove their files.
stop_servers() {
  local fd pid i
  for fd in "${fds[@]}"; do exec {fd}>&-; done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

url() { # version: the server's URL once it is up
  local i
  for ((i = 0; i < 900; i++)); do
    if grep -q '^TXBOX_TEST_POSTGRES_URL=' "$tmp/url$1" 2>/dev/null; then
      sed -n 's/^TXBOX_TEST_POSTGRES_URL=//p' "$tmp/url$1"
      return 0
    fi
    if [ -s "$tmp/log$1" ]; then break; fi # pgserve failed
    sleep 0.1
  done
  echo "pg-matrix: PostgreSQL $1 did not start:" >&2
  cat "$tmp/log$1" >&2
  return 1
}

status=0
summary=()
for v in "${versions[@]}"; do
  if ! u=$(url "$v"); then
    status=1
    summary+=("PostgreSQL $v: did not start")
    continue
  fi
  skip=() what=""
  if ((v < 15)); then
    skip=(-skip "$wal_tests") what=", table mode only: WAL mode needs 15+"
  fi
  echo "pg-matrix: PostgreSQL $v at $u: go test ${flags[*]} ${skip[*]} ${pkgs[*]}" >&2
  start=$SECONDS
  if TXBOX_TEST_POSTGRES_URL=$u go test "${flags[@]}" "${skip[@]}" "${pkgs[@]}"; then
    summary+=("PostgreSQL $v: ok ($((SECONDS - start))s$what)")
  else
    status=1
    summary+=("PostgreSQL $v: FAIL ($((SECONDS - start))s)")
  fi
done
stop_servers
echo "pg-matrix:" >&2
printf '  %s\n' "${summary[@]}" >&2
exit $status
