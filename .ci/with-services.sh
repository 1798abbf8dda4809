#!/usr/bin/env bash
# Run a command with the services the test suite needs, started here on loopback and stopped
# afterwards (only what this script started): PostgreSQL on 127.0.0.1 for the storage tests, and
# a single-node Slurm on 127.0.0.1 (.ci/slurm.sh) for tests/test_search_slurm.py.
# Browser tests need Debian's chromium; both are installed with apt when we are root and they
# are missing. Without root or apt, those tests skip and say why.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export SERVICES_OWNER=$$  # slurm.sh stops only the daemons this run started
started_pg=""
if [ -f "$here/services.sh" ]; then
  if url=$(bash "$here/services.sh" start); then
    export TLMSEARCH_TEST_PG_URL="$url"
    started_pg=1
  else
    echo "with-services: PostgreSQL could not be started; its tests will skip" >&2
  fi
fi
started_slurm=""
if [ -f "$here/slurm.sh" ]; then
  t0=$(date +%s)
  if conf=$(bash "$here/slurm.sh" start); then
    export TLMSEARCH_TEST_SLURM="$conf"
    started_slurm=1
    echo "with-services: Slurm up in $(( $(date +%s) - t0 )) s ($conf)" >&2
  else
    echo "with-services: Slurm could not be started; its tests will skip" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
    >/dev/null 2>&1 || echo "with-services: chromium could not be installed" >&2
fi
"$@"
rc=$?
[ -n "$started_pg" ] && bash "$here/services.sh" stop >/dev/null 2>&1
[ -n "$started_slurm" ] && bash "$here/slurm.sh" stop >/dev/null 2>&1
exit $rc
