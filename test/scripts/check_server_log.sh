#!/usr/bin/env bash
# TAP over a server log: fails if a backend died by a signal, the server
# restarted after a crash, or PostgreSQL reported leaked resources.
set -u
log=$1
n=0
check() {
	local what=$1 pattern=$2 hits
	n=$((n + 1))
	hits=$(grep -E "$pattern" "$log" | head -5)
	if [[ -z "$hits" ]]; then
		echo "ok $n - no $what"
	else
		echo "not ok $n - $what"
		echo "$hits" | sed 's/^/# /'
	fi
}
echo "1..4"
check "backend terminated by a signal" 'terminated by signal|was terminated by exception'
check "crash restart" 'terminating any other active server processes|all server processes terminated|database system was interrupted|was not properly shut down'
check "leak warnings" 'leaked|leak'
check "PANIC" 'PANIC:'
