#!/usr/bin/env bash
# The GPU suite: on a machine with an NVIDIA GPU, with the engine forced to
# the GPU, the regression and pgTAP suites, CPU = GPU comparisons on several
# shapes (k-means and k-medoids), split fits (several devices, out of core,
# half precision), 16 sessions sharing the GPU, cancellation of long GPU
# fits, and the server-log watch; ends with one line
# "N passed, M failed".
#
# PostgreSQL must be running with this build installed; on the project's GPU
# machine (see ../shared/device/README.md):
#   make && make install DESTDIR=$PWD/.devbundle/stage   (on the build machine)
#   source .devbundle/up && test/gpu/run_gpu_suite.sh   (on the GPU machine)
# SERVER_LOG names the server's log file (default /tmp/pg.log, where up puts it).
# KM_GPU_DEVICES sets kmeans_gpu.devices for every session of the suite (for
# example 'all' on a machine with several GPUs: every fit is then split over
# them, and must give what one GPU and the CPU engine give).
set -u
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-/tmp/gpu_suite}
mkdir -p "$out"
chmod 777 "$out"
log=${SERVER_LOG:-/tmp/pg.log}

passed=0
failed=0
summary=()
count_tap() {
	local name=$1 file=$2 status=$3 ok nok
	ok=$(grep -cE '^[[:space:]]*ok [0-9]+' "$file")
	nok=$(grep -cE '^[[:space:]]*not ok [0-9]+' "$file")
	if [[ $status -ne 0 && $nok -eq 0 ]]; then
		nok=1
		echo "$name: exited with status $status"
	fi
	passed=$((passed + ok))
	failed=$((failed + nok))
	summary+=("$name: $ok passed, $nok failed")
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== devices"
psql -X -q -c 'DROP DATABASE IF EXISTS kmeans_gpu_suite' -c 'CREATE DATABASE kmeans_gpu_suite'
psql -X -q -d kmeans_gpu_suite -c 'CREATE EXTENSION kmeans_gpu'
psql -X -d kmeans_gpu_suite -c 'SELECT * FROM kmeans_gpu_devices()' | tee "$out/devices.txt"
n=$(psql -X -At -d kmeans_gpu_suite -c 'SELECT count(*) FROM kmeans_gpu_devices()')
{ [[ $n -ge 1 ]] && echo "ok 1 - kmeans_gpu_devices() lists $n GPU(s)" ||
	echo "not ok 1 - kmeans_gpu_devices() lists no GPU"; } >"$out/devices.tap"
cat "$out/devices.tap"
count_tap devices "$out/devices.tap" 0

base=${KM_GPU_DEVICES:+-c kmeans_gpu.devices=$KM_GPU_DEVICES}
[[ -n "$base" ]] && echo "== every session with kmeans_gpu.devices = '$KM_GPU_DEVICES'"
export PGOPTIONS="-c kmeans_gpu.engine=gpu $base"

echo "== pg_regress, engine gpu"
tests=$(ls sql/*.sql | sed -e 's|sql/||' -e 's|\.sql$||' | grep -v -e '^kmeans_gpu--' -e '^kmeans_gpu_sharded--' | sort)
# the settings' own tests show their defaults, which KM_GPU_DEVICES changes by design
[[ -n "$base" ]] && tests=$(echo "$tests" | grep -v -x -e storage -e gpu_plan)
"${PG_REGRESS:-pg_regress}" --inputdir="$root" --outputdir="$out/regress" \
	--bindir="${PGBIN:-$(dirname "$(command -v psql)")}" \
	--dbname=kmeans_gpu_regress --load-extension=kmeans_gpu $tests >"$out/regress.log" 2>&1
status=$?
cat "$out/regress.log"
ok=$(grep -cE '\.\.\. ok|^ok [0-9]+' "$out/regress.log")
nok=$(grep -cE '\.\.\. FAILED|^not ok [0-9]+' "$out/regress.log")
[[ $status -ne 0 && $nok -eq 0 ]] && nok=1
passed=$((passed + ok))
failed=$((failed + nok))
summary+=("pg_regress: $ok passed, $nok failed")

echo "== pgTAP, engine gpu"
psql -X -q -c 'DROP DATABASE IF EXISTS kmeans_gpu_tap' -c 'CREATE DATABASE kmeans_gpu_tap'
psql -X -q -d kmeans_gpu_tap -c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION kmeans_gpu'
: >"$out/pgtap.log"
status=0
for f in $(ls test/tap/*.sql | grep -v '_big_' | sort); do
	echo "# $f" >>"$out/pgtap.log"
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d kmeans_gpu_tap -f "$f" >>"$out/pgtap.log" 2>&1 || status=1
done
cat "$out/pgtap.log"
count_tap pgTAP "$out/pgtap.log" $status

echo "== CPU = GPU"
export PGOPTIONS="$base"
python3 test/gpu/cpu_gpu_compare.py >"$out/compare.tap" 2>&1
status=$?
cat "$out/compare.tap"
count_tap "CPU = GPU" "$out/compare.tap" $status

echo "== k-means|| (seeded on the host, fitted on the GPU)"
python3 test/gpu/kmeans_parallel_gpu.py >"$out/kmeans_parallel.tap" 2>&1
status=$?
cat "$out/kmeans_parallel.tap"
count_tap "k-means||" "$out/kmeans_parallel.tap" $status

echo "== k-medoids, CPU = GPU"
python3 test/gpu/kmedoids_gpu.py >"$out/kmedoids.tap" 2>&1
status=$?
cat "$out/kmedoids.tap"
count_tap "k-medoids" "$out/kmedoids.tap" $status

echo "== split fits: several devices, out of core, half precision"
python3 test/gpu/split_gpu.py >"$out/split.tap" 2>&1
status=$?
cat "$out/split.tap"
count_tap "split fits" "$out/split.tap" $status

echo "== concurrency"
python3 test/gpu/concurrency_gpu.py >"$out/concurrency.tap" 2>&1
status=$?
cat "$out/concurrency.tap"
count_tap concurrency "$out/concurrency.tap" $status

echo "== cancellation"
python3 test/gpu/cancel_gpu.py >"$out/cancel.tap" 2>&1
status=$?
cat "$out/cancel.tap"
count_tap cancellation "$out/cancel.tap" $status

echo "== server log watch"
test/scripts/check_server_log.sh "$log" >"$out/logwatch.tap" 2>&1
status=$?
cat "$out/logwatch.tap"
count_tap "server log" "$out/logwatch.tap" $status

echo
for line in "${summary[@]}"; do echo "  $line"; done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
