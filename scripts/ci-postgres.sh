#!/usr/bin/env bash
# Throwaway PostgreSQL server for the tuning-DB tests. SOURCED by .ci/run (under `set -euo pipefail`):
#   . scripts/ci-postgres.sh; trap ci_postgres_stop EXIT
# On success it exports TRITONBLAS_TEST_PG_URL. Any failure prints a warning and leaves it unset (the
# PostgreSQL tests then skip): a missing database server must not hide the rest of the suite's result.
# Every step is checked by hand with `|| return 1`, because `set -e` does not apply inside a function
# called from an `||` list, and no unset variable may be expanded bare, because `set -u` would end CI.

_ci_pg_dir=""
_ci_pg_bin=""
_ci_pg_user=""

_ci_pg_as() {
  # initdb and postgres refuse to run as root: run them as the cluster's owner, from a directory that
  # user can enter (CI's checkout may sit under root's private home).
  if [ "$(id -u)" = 0 ]; then
    (cd "$_ci_pg_dir" && runuser -u "$_ci_pg_user" -- "$@")
  else
    "$@"
  fi
}

_ci_pg_find_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then _ci_pg_bin="$d"; fi
  done
  [ -n "$_ci_pg_bin" ]
}

_ci_pg_install() {
  _ci_pg_find_bin && return 0
  [ "$(id -u)" = 0 ] || { echo "ci-postgres: PostgreSQL is not installed and we are not root" >&2; return 1; }
  command -v apt-get >/dev/null 2>&1 || { echo "ci-postgres: no apt-get to install PostgreSQL" >&2; return 1; }
  echo "ci-postgres: installing PostgreSQL from Debian's packages" >&2
  # policy-rc.d exit 101 keeps the package from starting its own cluster on port 5432.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  local rc=$?
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$rc" = 0 ] || { echo "ci-postgres: apt-get install postgresql failed" >&2; return 1; }
  _ci_pg_find_bin
}

_ci_pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_ci_pg_start() {
  _ci_pg_install || return 1
  if [ "$(id -u)" = 0 ]; then
    _ci_pg_user=postgres
    if ! id -u "$_ci_pg_user" >/dev/null 2>&1; then
      _ci_pg_user=tbpgtest
      id -u "$_ci_pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$_ci_pg_user" || return 1
    fi
  else
    _ci_pg_user="$(id -un)"
  fi
  _ci_pg_dir="$(mktemp -d "${TMPDIR:-/tmp}/tritonblas-pg.XXXXXX")" || return 1
  if [ "$(id -u)" = 0 ]; then chown "$_ci_pg_user" "$_ci_pg_dir" || return 1; fi
  _ci_pg_as "$_ci_pg_bin/initdb" -D "$_ci_pg_dir/data" -U postgres --auth=trust --encoding=UTF8 \
    --no-locale >"$_ci_pg_dir/initdb.log" 2>&1 \
    || { echo "ci-postgres: initdb failed:" >&2; tail -5 "$_ci_pg_dir/initdb.log" >&2; return 1; }
  local port
  port="$(_ci_pg_free_port)" || return 1
  # Loopback only, socket in the throwaway dir; fsync off: the data lives for one test run.
  _ci_pg_as "$_ci_pg_bin/pg_ctl" -D "$_ci_pg_dir/data" -l "$_ci_pg_dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $_ci_pg_dir -c fsync=off -c max_connections=50" \
    start >/dev/null \
    || { echo "ci-postgres: server did not start:" >&2; tail -5 "$_ci_pg_dir/server.log" >&2; return 1; }
  _ci_pg_as "$_ci_pg_bin/createdb" -h 127.0.0.1 -p "$port" -U postgres tritonblas_test \
    || { echo "ci-postgres: createdb failed" >&2; return 1; }
  export TRITONBLAS_TEST_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$port/tritonblas_test"
  echo "ci-postgres: PostgreSQL running at $TRITONBLAS_TEST_PG_URL" >&2
}

ci_postgres_stop() {
  if [ -n "${_ci_pg_dir:-}" ] && [ -d "$_ci_pg_dir" ]; then
    if [ -n "${_ci_pg_bin:-}" ] && [ -f "$_ci_pg_dir/data/postmaster.pid" ]; then
      _ci_pg_as "$_ci_pg_bin/pg_ctl" -D "$_ci_pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$_ci_pg_dir" || true
  fi
  _ci_pg_dir=""
  return 0
}

if ! _ci_pg_start; then
  echo "ci-postgres: WARNING: no PostgreSQL server; the PostgreSQL tuning-DB tests will be skipped" >&2
  ci_postgres_stop
  unset TRITONBLAS_TEST_PG_URL
fi
true
