#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and the demo.
#
#   pg_server.sh start DIR [PORT]   initdb in DIR, start, print the env to source
#   pg_server.sh stop DIR
#
# When run as root the server runs as the unprivileged user "postgres"
# (created by Debian's postgresql package).  The server log is DIR/server.log.
set -euo pipefail

cmd=$1
dir=$2
port=${3:-55432}
bindir=$(pg_config --bindir)

as_server_user() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case "$cmd" in
start)
	rm -rf "$dir"
	mkdir -p "$dir"
	[[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
	as_server_user "$bindir/initdb" -D "$dir/data" -A trust -U postgres >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; exit 1; }
	cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
max_connections = 60
shared_buffers = 256MB
max_worker_processes = 16
max_parallel_workers = 8
max_parallel_workers_per_gather = 2
log_min_messages = warning
log_line_prefix = '%m [%p] '
fsync = off
synchronous_commit = off
full_page_writes = off
jit = off
CONF
	as_server_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
	echo "export PGHOST='$dir' PGPORT=$port PGUSER=postgres PGDATABASE=postgres"
	;;
stop)
	if [[ -f "$dir/data/postmaster.pid" ]]; then
		as_server_user "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
	fi
	;;
*)
	echo "usage: $0 start|stop DIR [PORT]" >&2
	exit 2
	;;
esac
