#!/usr/bin/env bash
# Install (if needed) and start PostgreSQL on 127.0.0.1 for the search tests; idempotent.
#   .ci/services.sh [start]   prints the URL to use as TLMSEARCH_TEST_PG_URL, e.g.
#                             export TLMSEARCH_TEST_PG_URL=$(.ci/services.sh start)
#   .ci/services.sh stop      stops the server if (and only if) `start` started it
# Debian/Ubuntu with root (CI containers); no systemd needed (pg_ctlcluster).
set -euo pipefail
PG_USER=${PG_USER:-tlmsearch}
PG_PASS=${PG_PASS:-tlmsearch}
PG_DB=${PG_DB:-tlmsearch}
PG_PORT=${PG_PORT:-5432}
MARK=${TMPDIR:-/tmp}/tlmsearch-services-started-pg

if [ "${1:-start}" = stop ]; then
  if [ -f "$MARK" ]; then
    read -r VER < "$MARK"
    pg_ctlcluster "$VER" main stop >&2 || true
    rm -f "$MARK"
  fi
  exit 0
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
VER=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -q "^$VER main$"; then
  pg_createcluster "$VER" main --port "$PG_PORT" >&2
fi
CONF=/etc/postgresql/$VER/main/postgresql.conf
# Loopback only.
if ! grep -q "^listen_addresses = '127.0.0.1'" "$CONF"; then
  echo "listen_addresses = '127.0.0.1'" >> "$CONF"
fi
if ! pg_lsclusters -h | grep "^$VER main" | grep -q online; then
  pg_ctlcluster "$VER" main start >&2
  echo "$VER" > "$MARK"
fi
for _ in $(seq 1 30); do
  if su postgres -c "psql -h 127.0.0.1 -p $PG_PORT -tAc 'select 1'" >/dev/null 2>&1 \
    || su postgres -c "psql -p $PG_PORT -tAc 'select 1'" >/dev/null 2>&1; then
    break
  fi
  sleep 1
done
psql_admin() { su postgres -c "psql -p $PG_PORT -v ON_ERROR_STOP=1 -tAc \"$1\""; }
if [ "$(psql_admin "select 1 from pg_roles where rolname='$PG_USER'")" != "1" ]; then
  psql_admin "create role $PG_USER login password '$PG_PASS'" >&2
fi
if [ "$(psql_admin "select 1 from pg_database where datname='$PG_DB'")" != "1" ]; then
  psql_admin "create database $PG_DB owner $PG_USER" >&2
fi
echo "postgresql://$PG_USER:$PG_PASS@127.0.0.1:$PG_PORT/$PG_DB"
