#!/usr/bin/env bash
# make test: install what is missing, build, install, start a throwaway
# server, run every suite, and end with one line "N passed, M failed".
#
# Suites: the CUDA kernels' stack frames (test/scripts/check_kernel_frames.py,
# where nvcc is found), the engine's own tests (test/engine), pg_regress (sql/, expected/),
# pgTAP (test/tap), the comparisons with scikit-learn and the kmedoids
# package (test/compare), the
# reliability suites (test/reliability: randomised properties, concurrency,
# cancellation, memory bounds), many servers (test/sharded: a coordinator,
# shards and standbys of its own), and a watch over the server log for
# crashed backends and leaks, after every suite and over the whole log at
# the end.
# KM_TEST_SKIP_BIG=1 skips the multi-gigabyte parallel test;
# KM_PROP_SECONDS sets the property run's time budget (120 s);
# KM_TEST_PORT the throwaway server's port (55432).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

test/scripts/ensure_deps.sh || exit 1
export PYTHONPATH="$root/.deps/python${PYTHONPATH:+:$PYTHONPATH}"
make -s -j"$(nproc)" || exit 1
make -s test/engine/engine_test test/engine/kmedoids_test || exit 1
if [[ $(id -u) -eq 0 ]]; then
	make -s install >/dev/null || exit 1
else
	sudo make -s install >/dev/null || exit 1
fi

tmp=$(mktemp -d /tmp/kmeans_gpu_test.XXXXXX)
chmod 755 "$tmp"
eval "$(test/scripts/pg_server.sh start "$tmp/pg" "${KM_TEST_PORT:-55432}")" || exit 1
trap 'test/scripts/pg_server.sh stop "$tmp/pg"' EXIT

passed=0
failed=0
summary=()

log="$tmp/pg/server.log"
log_offset=0
watch_n=0
watch_time=$SECONDS

# Check the part of the server log written since the last call (during
# suite $1) for crashed backends, restarts and leaks: one TAP line, kept in
# logwatch_each.tap and counted once at the end.
watch_log() {
	local suite=$1 size part="$tmp/log.part" took=$((SECONDS - watch_time))
	watch_time=$SECONDS
	size=$(stat -c %s "$log")
	tail -c +$((log_offset + 1)) "$log" | head -c $((size - log_offset)) >"$part"
	log_offset=$size
	watch_n=$((watch_n + 1))
	test/scripts/check_server_log.sh "$part" >"$part.tap" 2>&1
	if grep -qE '^not ok' "$part.tap"; then
		echo "not ok $watch_n - server log after $suite (the suite took $took s)"
		grep -E '^(not ok|#)' "$part.tap" | sed 's/^/# /'
	else
		echo "ok $watch_n - server log clean after $suite (the suite took $took s)"
	fi | tee -a "$tmp/logwatch_each.tap"
}

# Count TAP results in file $2 for suite $1; $3 is the suite's exit status.
count_tap() {
	local name=$1 file=$2 status=$3 ok nok
	ok=$(grep -cE '^[[:space:]]*ok [0-9]+' "$file")
	nok=$(grep -cE '^[[:space:]]*not ok [0-9]+' "$file")
	if [[ $status -ne 0 && $nok -eq 0 ]]; then
		nok=1 # the suite died before reporting a failure
		echo "$name: exited with status $status"
	fi
	if [[ $((ok + nok)) -eq 0 ]]; then
		nok=1 # a suite that ran nothing (a missing runner, say) is a failure
		echo "$name: no test ran"
	fi
	passed=$((passed + ok))
	failed=$((failed + nok))
	summary+=("$name: $ok passed, $nok failed")
}

echo "== dependencies: every command and module the scripts use is in test/scripts/deps.txt"
/usr/bin/python3 test/scripts/check_deps.py >"$tmp/deps.tap" 2>&1
status=$?
cat "$tmp/deps.tap"
count_tap dependencies "$tmp/deps.tap" $status

echo "== CUDA kernels: no copy of the arguments on a thread's stack (ptxas -v)"
/usr/bin/python3 test/scripts/check_kernel_frames.py >"$tmp/frames.tap" 2>&1
status=$?
cat "$tmp/frames.tap"
count_tap "kernel frames" "$tmp/frames.tap" $status

echo "== engine tests"
test/engine/engine_test >"$tmp/engine.tap" 2>&1
status=$?
cat "$tmp/engine.tap"
count_tap engine "$tmp/engine.tap" $status
watch_log engine

echo "== k-medoids engine tests"
test/engine/kmedoids_test >"$tmp/kmedoids_engine.tap" 2>&1
status=$?
cat "$tmp/kmedoids_engine.tap"
count_tap "k-medoids engine" "$tmp/kmedoids_engine.tap" $status

echo "== pg_regress"
regress=$(pg_config --pkglibdir)/pgxs/src/test/regress/pg_regress
tests=$(ls sql/*.sql | sed -e 's|sql/||' -e 's|\.sql$||' | grep -v -e '^kmeans_gpu--' -e '^kmeans_gpu_sharded--' | sort)
mkdir -p "$tmp/regress"
"$regress" --inputdir="$root" --outputdir="$tmp/regress" --bindir="$(pg_config --bindir)" \
	--dbname=contrib_regression --load-extension=kmeans_gpu $tests >"$tmp/regress.log" 2>&1
status=$?
cat "$tmp/regress.log"
ok=$(grep -cE '\.\.\. ok|^ok [0-9]+' "$tmp/regress.log")
nok=$(grep -cE '\.\.\. FAILED|^not ok [0-9]+' "$tmp/regress.log")
[[ $status -ne 0 && $nok -eq 0 ]] && nok=1
[[ -f "$tmp/regress/regression.diffs" ]] && cat "$tmp/regress/regression.diffs"
passed=$((passed + ok))
failed=$((failed + nok))
summary+=("pg_regress: $ok passed, $nok failed")
watch_log pg_regress

echo "== pgTAP"
createdb tap && psql -q -d tap -c 'CREATE EXTENSION pgtap; CREATE EXTENSION kmeans_gpu;' || exit 1
tapfiles=$(ls test/tap/*.sql | sort)
if [[ "${KM_TEST_SKIP_BIG:-0}" == 1 ]]; then
	tapfiles=$(echo "$tapfiles" | grep -v '_big_')
fi
pg_prove -v -d tap $tapfiles >"$tmp/pgtap.log" 2>&1
status=$?
cat "$tmp/pgtap.log"
count_tap pgTAP "$tmp/pgtap.log" $status
watch_log pgTAP

echo "== comparison with scikit-learn"
/usr/bin/python3 test/compare/sklearn_compare.py >"$tmp/compare.tap" 2>&1
status=$?
cat "$tmp/compare.tap"
count_tap sklearn "$tmp/compare.tap" $status
watch_log sklearn

echo "== kmeans_score and kmeans_sweep against scikit-learn's metrics"
/usr/bin/python3 test/compare/score_compare.py >"$tmp/score_compare.tap" 2>&1
status=$?
cat "$tmp/score_compare.tap"
count_tap "scores" "$tmp/score_compare.tap" $status
watch_log scores

echo "== k-medoids against the kmedoids package (FasterPAM)"
/usr/bin/python3 test/compare/kmedoids_compare.py >"$tmp/kmedoids_compare.tap" 2>&1
status=$?
cat "$tmp/kmedoids_compare.tap"
count_tap "k-medoids" "$tmp/kmedoids_compare.tap" $status
watch_log k-medoids

# The reliability suites (test/reliability): each prints TAP.
for suite in property_run concurrency cancel memory_bounds; do
	echo "== reliability: $suite"
	/usr/bin/python3 "test/reliability/$suite.py" >"$tmp/$suite.tap" 2>&1
	status=$?
	cat "$tmp/$suite.tap"
	count_tap "$suite" "$tmp/$suite.tap" $status
	watch_log "$suite"
done

# Many servers (test/sharded): its own coordinator, shards and standbys on
# ports KM_SHARDED_PORT (56311) to KM_SHARDED_PORT + 13; it checks their logs.
echo "== many servers: kmeans_fit_sharded, failover, postgres_fdw"
/usr/bin/python3 test/sharded/sharded_test.py >"$tmp/sharded.tap" 2>&1
status=$?
cat "$tmp/sharded.tap"
count_tap "many servers" "$tmp/sharded.tap" $status

echo "== server log watch"
test/scripts/check_server_log.sh "$tmp/pg/server.log" >"$tmp/logwatch.tap" 2>&1
status=$?
cat "$tmp/logwatch.tap"
count_tap "server log" "$tmp/logwatch.tap" $status
count_tap "server log, per suite" "$tmp/logwatch_each.tap" 0

echo
for line in "${summary[@]}"; do echo "  $line"; done
echo "$passed passed, $failed failed"
if [[ $failed -eq 0 ]]; then
	test/scripts/pg_server.sh stop "$tmp/pg"
	rm -rf "$tmp"
	exit 0
fi
echo "logs and the server's data directory are in $tmp"
exit 1
