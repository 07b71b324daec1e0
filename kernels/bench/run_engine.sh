#!/bin/bash
# run_engine.sh: every check and benchmark of the CUDA engine, on the GPU
# machine, from binaries built beforehand (make -C kernels/bench engine, and
# bench_assign_gemm for the filter's own harness).  Fashion-MNIST: copy
# /usr/share/datasets/fashion-mnist/{train,t10k}-images-idx3-ubyte.gz into
# kernels/bench/bin first (carried with the binaries; decompressed here).
# Full logs go to $OUT (or /tmp/engine_out); a short summary is printed last,
# the per-iteration table at the very end.
#
#   kernels/bench/run_engine.sh [quick|full] [gemm]
#     quick: no compute-sanitizer, no ncu (default)
#     full:  with them, time permitting
#     gemm:  also bench_assign_gemm (validation of k3/k3t/k6t, their timing)
#
# Everything is bounded by DEADLINE seconds (default 280), most important
# first: kernel validation, the per-iteration table, the engine cases, the
# step times, then the rest.
set -u
OUT=${OUT:-/tmp/engine_out}
mkdir -p "$OUT"
B=kernels/bench/bin
S="$OUT/summary.txt"
: > "$S"
export OMP_NUM_THREADS=$(nproc)
DEADLINE=${DEADLINE:-280}
MODE=${1:-quick}
GEMM=${2:-}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
left() { echo $((DEADLINE - SECONDS)); }
cap() { local l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total \
	--format=csv >> "$S" 2>&1

# 1. every kernel family against its C reference
timeout $(cap 70) $B/bench_kernels validate > "$OUT/kernels_validate.log" 2>&1
echo "bench_kernels validate rc=$?: $(grep -c '^ok' "$OUT/kernels_validate.log") ok, $(grep -c '^FAIL' "$OUT/kernels_validate.log") FAIL [$SECONDS s]" >> "$S"
grep -E '^FAIL' "$OUT/kernels_validate.log" | head -12 >> "$S"

# 2. per-iteration time against cuBLAS SGEMM (the targets); BENCH_VERBOSE=1 adds a
#    traced fit per shape (the engine's batches and iterations, KMG_VERBOSE), REPEAT=1
#    a second run of the table (the spread)
timeout $(cap 120) $B/bench_engine bench > "$OUT/engine_bench.log" 2>&1
echo "engine bench rc=$? [$SECONDS s]" >> "$S"
if [ "${REPEAT:-0}" = 1 ]; then
	BENCH_VERBOSE= timeout $(cap 90) $B/bench_engine bench > "$OUT/engine_bench2.log" 2>&1
	echo "engine bench (repeat) rc=$? [$SECONDS s]" >> "$S"
fi

# 3. the engine against ref_kmeans.c and the CPU engine, one process per case, four at a time
N=$($B/bench_engine ncases 2>/dev/null || echo 0)
mkdir -p "$OUT/cases"
T3=$(cap 90)
seq 0 $((N - 1)) | xargs -P 4 -I{} sh -c "timeout $T3 $B/bench_engine case {} > $OUT/cases/{}.log 2>&1; rc=\$?; [ \$rc -ne 0 ] && echo \"case {} rc=\$rc\" >> $OUT/cases/{}.log"
cat $(ls "$OUT"/cases/*.log | sort -V) > "$OUT/engine_cases.log" 2>/dev/null
rm -rf "$OUT/cases"
echo "engine cases: $(grep -c '^ok' "$OUT/engine_cases.log") ok, $(grep -c '^FAIL' "$OUT/engine_cases.log") FAIL, $(grep -c ' rc=' "$OUT/engine_cases.log") crashed/timed out (of $N) [$SECONDS s]" >> "$S"
grep -E '^FAIL|rc=' "$OUT/engine_cases.log" | head -20 >> "$S"

# 4. API checks (assign, map, streaming, determinism, cancellation, errors)
timeout $(cap 60) $B/bench_engine api > "$OUT/engine_api.log" 2>&1
echo "engine api checks rc=$?: $(grep -c '^ok' "$OUT/engine_api.log") ok, $(grep -c '^FAIL' "$OUT/engine_api.log") FAIL [$SECONDS s]" >> "$S"
grep -E '^FAIL' "$OUT/engine_api.log" | head -10 >> "$S"

# 5. step times of each kernel family
if [ $(left) -gt 30 ]; then
	timeout $(cap 60) $B/bench_kernels bench > "$OUT/kernels_bench.log" 2>&1
	echo "bench_kernels bench rc=$? [$SECONDS s]" >> "$S"
	grep -E 'fused iteration|run-2|filter path|^\(' "$OUT/kernels_bench.log" >> "$OUT/steps.txt"
fi

# 6. the filter GEMM's own harness: top-2 (k3) against top-3 (k3t, k6t)
if [ "$GEMM" = "gemm" ] && [ $(left) -gt 40 ]; then
	timeout $(cap 60) $B/bench_assign_gemm --versions k3,k3t,k6t --max-shapes 3 --reps 10 \
		> "$OUT/gemm.log" 2>&1
	echo "bench_assign_gemm rc=$?: $(grep -E '^validation:' "$OUT/gemm.log" | tail -1) [$SECONDS s]" >> "$S"
	grep -E 'FAIL' "$OUT/gemm.log" | head -10 >> "$S"
	sed -n '/== table/,$p' "$OUT/gemm.log" | grep -E 'k3|cuBLAS|shape' >> "$OUT/steps.txt"
fi

# 7. memory checker on small cases (narrow, wide, filter, re-seeding), then ncu
if [ "$MODE" = "full" ] && command -v compute-sanitizer > /dev/null; then
	: > "$OUT/sanitizer.log"
	for i in 2 6 9 12 17 24; do
		[ $(left) -lt 25 ] && break
		timeout $(cap 40) compute-sanitizer --tool memcheck --error-exitcode 9 $B/bench_engine case $i \
			>> "$OUT/sanitizer.log" 2>&1
		echo "memcheck case $i rc=$?" >> "$OUT/sanitizer.log"
	done
	if [ $(left) -gt 25 ]; then
		timeout $(cap 40) compute-sanitizer --tool racecheck --error-exitcode 9 $B/bench_engine case 17 \
			>> "$OUT/sanitizer.log" 2>&1
		echo "racecheck case 17 rc=$?" >> "$OUT/sanitizer.log"
	fi
	grep -E 'rc=' "$OUT/sanitizer.log" | tr '\n' ' ' >> "$S"
	echo >> "$S"
fi
if [ "$MODE" = "full" ] && [ $(left) -gt 40 ] && command -v ncu > /dev/null; then
	timeout $(cap 60) ncu --clock-control none -k regex:'kmg_(narrow|wide|direct|piece|exact|classify)' \
		--section SpeedOfLight --section Occupancy --section WarpStateStats \
		$B/bench_kernels profile > "$OUT/ncu.log" 2>&1
	echo "ncu rc=$? [$SECONDS s]" >> "$S"
fi

cat "$S"
[ -f "$OUT/steps.txt" ] && cat "$OUT/steps.txt"
echo
[ -f "$OUT/engine_bench2.log" ] && { echo "(repeat)"; sed -n '/shape (n,d,k)/,/^$/p' "$OUT/engine_bench2.log"; }
sed -n '/shape (n,d,k)/,/^$/p' "$OUT/engine_bench.log"
