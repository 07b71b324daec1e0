#!/bin/bash
# run_engine.sh: every check and benchmark of the CUDA engine, on the GPU
# machine, from binaries built beforehand (make -C kernels/bench engine).
# Full logs go to $OUT (or /tmp/engine_out); a short summary is printed last.
#
#   kernels/bench/run_engine.sh [quick]
set -u
OUT=${OUT:-/tmp/engine_out}
mkdir -p "$OUT"
B=kernels/bench/bin
S="$OUT/summary.txt"
: > "$S"
export OMP_NUM_THREADS=$(nproc)
DEADLINE=${DEADLINE:-225}	# seconds this script may take
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total \
	--format=csv >> "$S" 2>&1

# 1. every kernel family against its C reference, and the step times
timeout 90 $B/bench_kernels > "$OUT/kernels.log" 2>&1
echo "bench_kernels rc=$?: $(grep -c '^ok' "$OUT/kernels.log") ok, $(grep -c '^FAIL' "$OUT/kernels.log") FAIL" >> "$S"

# 2. the engine against ref_kmeans.c, one process per case (a crash stays local)
N=$($B/bench_engine ncases 2>/dev/null || echo 0)
: > "$OUT/engine_cases.log"
for i in $(seq 0 $((N - 1))); do
	timeout 60 $B/bench_engine case "$i" >> "$OUT/engine_cases.log" 2>&1
	rc=$?
	[ $rc -ne 0 ] && echo "case $i rc=$rc" >> "$OUT/engine_cases.log"
done
echo "engine cases: $(grep -c '^ok' "$OUT/engine_cases.log") ok, $(grep -c '^FAIL' "$OUT/engine_cases.log") FAIL, $(grep -c ' rc=' "$OUT/engine_cases.log") crashed (of $N)" >> "$S"
grep -E '^FAIL|rc=' "$OUT/engine_cases.log" | head -20 >> "$S"

timeout 90 $B/bench_engine api > "$OUT/engine_api.log" 2>&1
echo "engine api checks rc=$?: $(grep -c '^ok' "$OUT/engine_api.log") ok, $(grep -c '^FAIL' "$OUT/engine_api.log") FAIL" >> "$S"
grep -E '^FAIL' "$OUT/engine_api.log" | head -10 >> "$S"

# 3. per-iteration time against cuBLAS SGEMM
timeout 150 $B/bench_engine bench > "$OUT/engine_bench.log" 2>&1
echo "engine bench rc=$?" >> "$S"
sed -n '/shape (n,d,k)/,$p' "$OUT/engine_bench.log" | grep -v '^$' | head -12 >> "$S"
grep -E 'filter path|fused pass|^\(' "$OUT/kernels.log" >> "$S"

# 4. memory checker on small cases (direct path, filter path, re-seeding, fallback)
if [ "${1:-}" != "quick" ] && command -v compute-sanitizer > /dev/null; then
	: > "$OUT/sanitizer.log"
	for i in 0 4 12 14 17; do
		left=$((DEADLINE - SECONDS))
		[ $left -lt 15 ] && break
		timeout $((left < 60 ? left - 5 : 60)) compute-sanitizer --tool memcheck --error-exitcode 9 $B/bench_engine case $i \
			>> "$OUT/sanitizer.log" 2>&1
		echo "memcheck case $i rc=$?" >> "$OUT/sanitizer.log"
	done
	left=$((DEADLINE - SECONDS))
	[ $left -gt 15 ] && timeout $((left < 60 ? left - 5 : 60)) compute-sanitizer --tool racecheck --error-exitcode 9 $B/bench_engine case 0 \
		>> "$OUT/sanitizer.log" 2>&1
	echo "racecheck case 0 rc=$?" >> "$OUT/sanitizer.log"
	grep -E 'rc=' "$OUT/sanitizer.log" | tr '\n' ' ' >> "$S"
	echo >> "$S"
fi

# 5. where the fused and the update kernels spend their time (hardware counters)
left=$((DEADLINE - SECONDS))
if [ "${1:-}" != "quick" ] && [ $left -gt 40 ] && command -v ncu > /dev/null; then
	timeout $((left - 10)) ncu --clock-control none -k regex:'kmg_(direct|piece|exact|bounds|combine|reduce)' \
		--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
		$B/bench_kernels profile > "$OUT/ncu.log" 2>&1
	echo "ncu rc=$?" >> "$S"
	grep -E 'kmg_|Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Stall' "$OUT/ncu.log" \
		| head -60 >> "$OUT/ncu_summary.txt"
fi

cat "$S"
