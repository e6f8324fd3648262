#!/bin/sh
# mktable.sh creates the table the warm-up benchmarks read: ROWS rows (default
# 100 000 000) of e-mail-like keys, user<i>@example.com, in a schema of its own
# with a unique name, which it prints (schema.table). It is unlogged (no WAL:
# the benchmark only reads it), has no index (a scan needs none), and is
# vacuumed so that every page is all-visible and its hint bits are set, as in a
# table that has lived a while. About 6.5 GB at 100 M rows.
#
#	bench/scripts/mktable.sh [ROWS]          # prints e.g. warm_1764583200_4242.users
#	bench/scripts/mktable.sh drop SCHEMA     # drops it again (disk is shared)
#
# PGHOST, PGPORT, PGUSER, PGDATABASE select the server (default the local one,
# user postgres).
set -eu
: "${PGHOST:=127.0.0.1}" "${PGPORT:=5432}" "${PGUSER:=postgres}" "${PGDATABASE:=postgres}"
export PGHOST PGPORT PGUSER PGDATABASE

if [ "${1:-}" = drop ]; then
	case "${2:-}" in
	warm_*) psql -X -q -v ON_ERROR_STOP=1 -c "DROP SCHEMA \"$2\" CASCADE" ;;
	*) echo "usage: $0 drop warm_<...>" >&2; exit 2 ;;
	esac
	exit 0
fi

rows=${1:-100000000}
schema=warm_$(date +%s)_$$
# Rows go in chunks of 10 M, one transaction each, so that a failure midway
# leaves a partial table rather than nothing after minutes of work.
psql -X -q -v ON_ERROR_STOP=1 <<SQL
CREATE SCHEMA "$schema";
CREATE UNLOGGED TABLE "$schema".users (id bigint NOT NULL, email text NOT NULL);
SQL
start=0
while [ "$start" -lt "$rows" ]; do
	end=$((start + 10000000))
	[ "$end" -gt "$rows" ] && end=$rows
	psql -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO \"$schema\".users SELECT i, 'user' || i || '@example.com' FROM generate_series($start, $((end - 1))) i"
	start=$end
done
psql -X -q -v ON_ERROR_STOP=1 -c "VACUUM (FREEZE, ANALYZE) \"$schema\".users"
echo "$schema.users"
