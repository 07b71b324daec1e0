#!/usr/bin/python3
"""Compare the CPU engine's Lloyd iterations with scikit-learn's.

For each shape (n, d, k): make data (blobs plus noise), pick k rows as start
centroids, run test/bench/kmeans_bench with that explicit init, and run
sklearn's lloyd_iter_chunked_dense (the loop inside KMeans(algorithm="lloyd"))
from the same centroids, with the same thread count and BLAS limited to one
thread, for the same number of iterations.  Prints per-iteration times, their
ratio, and how far the two results are apart (labels that differ after the
same number of iterations, relative inertia difference).

The machine may be shared, so each side runs --repeat times, alternating,
and keeps its best median: a busy neighbour slows one run, not the table.

Run with /usr/bin/python3 (Debian's numpy and scikit-learn).
"""

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits
from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHAPES = "100000x32x16,100000x128x256,70000x784x10,50000x256x1024,200000x2x8"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_data(n, d, k, seed):
    """Blobs around 2k centres in [0, 1]^d (non-negative, like pixels or
    counts), with spread comparable to the gaps between centres, plus 10%
    uniform noise: Lloyd keeps moving rows for a while."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.0, 1.0, size=(2 * k, d))
    gap = np.sqrt(d / 6.0)                     # typical distance between centres
    sigma = 0.35 * gap / np.sqrt(d)
    x = centres[rng.integers(0, 2 * k, size=n)] + rng.normal(0.0, sigma, size=(n, d))
    noise = rng.random(n) < 0.1
    x[noise] = rng.uniform(-0.25, 1.25, size=(int(noise.sum()), d))
    x = np.ascontiguousarray(x, dtype=np.float32)
    init = np.ascontiguousarray(x[rng.choice(n, size=k, replace=False)])
    return x, init


def run_ours(bench, x, init, iters, threads, tmp):
    n, d = x.shape
    k = init.shape[0]
    xf = os.path.join(tmp, "x.f32")
    cf = os.path.join(tmp, "init.f32")
    lf = os.path.join(tmp, "labels.i32")
    of = os.path.join(tmp, "centroids.f32")
    x.tofile(xf)
    init.tofile(cf)
    cmd = [bench, "--n", str(n), "--d", str(d), "--k", str(k), "--data", xf,
           "--init-file", cf, "--max-iter", str(iters), "--tol", "0",
           "--threads", str(threads), "--labels-out", lf, "--centroids-out", of]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        key, _, val = line.partition(" ")
        res[key] = val
    labels = np.fromfile(lf, dtype=np.int32)
    centroids = np.fromfile(of, dtype=np.float32).reshape(k, d)
    return float(res["iter_ms_median"]), int(res["iterations"]), float(res["inertia"]), labels, centroids


def run_sklearn(x, init, iters, threads):
    n, d = x.shape
    k = init.shape[0]
    w = np.ones(n, dtype=np.float32)
    old = init.copy()
    new = np.empty_like(old)
    wic = np.empty(k, dtype=np.float32)
    labels = np.full(n, -1, dtype=np.int32)
    prev = labels.copy()
    shift = np.empty(k, dtype=np.float32)
    times = []
    done = 0
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(iters):
            t0 = time.perf_counter()
            lloyd_iter_chunked_dense(x, w, old, new, wic, labels, shift, threads)
            times.append(time.perf_counter() - t0)
            done += 1
            old, new = new, old
            if np.array_equal(labels, prev):
                break            # converged: the same stop rule as ours
            prev[:] = labels
        # labels for the final centroids, as our final pass computes them
        lloyd_iter_chunked_dense(x, w, old, new, wic, labels, shift, threads,
                                 update_centers=False)
    return 1e3 * float(np.median(times)), done, labels, old


def inertia(x, centroids, labels):
    diff = x.astype(np.float64) - centroids.astype(np.float64)[labels]
    return float(np.einsum("ij,ij->", diff, diff))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES,
                    help="comma-separated NxDxK (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads for both (default: number of cores)")
    ap.add_argument("--iters", type=int, default=12, help="Lloyd iterations")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3,
                    help="alternating runs per side; the best median counts")
    ap.add_argument("--bench", default=os.path.join(HERE, "kmeans_bench"))
    args = ap.parse_args()

    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv))
    print("machine: nproc=%d, cpu=%s" % (os.cpu_count(), cpu_model()))
    print("threads: %d, iterations: %d (tol 0, explicit init), seed %d, best of %d"
          % (args.threads, args.iters, args.seed, args.repeat))
    print()
    head = ("shape (n,d,k)", "ours ms/it", "sklearn ms/it", "ratio", "iters",
            "labels differ", "inertia rel diff")
    fmt = "%-20s %11s %14s %7s %7s %14s %17s"
    print(fmt % head)

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            n, d, k = (int(v) for v in shape.lower().split("x"))
            x, init = make_data(n, d, k, args.seed)
            ours_ms = sk_ms = float("inf")
            for _ in range(max(1, args.repeat)):
                ms, ours_it, ours_inertia, ours_labels, _ = run_ours(
                    args.bench, x, init, args.iters, args.threads, tmp)
                ours_ms = min(ours_ms, ms)
                ms, sk_it, sk_labels, sk_centroids = run_sklearn(x, init, args.iters, args.threads)
                sk_ms = min(sk_ms, ms)
            sk_inertia = inertia(x, sk_centroids, sk_labels)
            ratio = ours_ms / sk_ms
            worst = max(worst, ratio)
            print(fmt % ("%d,%d,%d" % (n, d, k), "%.2f" % ours_ms, "%.2f" % sk_ms,
                         "%.2f" % ratio, "%d/%d" % (ours_it, sk_it),
                         "%d" % int(np.count_nonzero(ours_labels != sk_labels)),
                         "%.2e" % (abs(ours_inertia - sk_inertia) / sk_inertia)))
            sys.stdout.flush()
    print()
    print("worst ratio (ours/sklearn): %.2f" % worst)


if __name__ == "__main__":
    main()
