#!/bin/sh
# run_cpu_bench.sh: the CPU engine against scikit-learn's Lloyd iteration
# (what "make bench" runs; the Makefile builds test/bench/kmeans_bench first).
# Arguments go to compare_sklearn.py, e.g. --shapes 100000x32x16 --threads 1.
#
# Debian's numpy and scikit-learn live in /usr/bin/python3, which may not be
# the python3 first on PATH.
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import numpy, sklearn, threadpoolctl' 2>/dev/null; then
	echo "run_cpu_bench.sh: $py lacks numpy/scikit-learn/threadpoolctl" \
		"(Debian: apt-get install python3-sklearn)" >&2
	exit 1
fi
exec "$py" "$here/compare_sklearn.py" --bench "$here/kmeans_bench" "$@"
