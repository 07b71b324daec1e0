#!/usr/bin/python3
"""Benchmarks of k-medoids and of afk-mc2 seeding, printed as tables (README).

1. kmedoids_fit (alternate and fasterpam, through SQL, CPU engine) against
   the kmedoids package's FasterPAM (PyPI), which needs the n x n distance
   matrix: scikit-learn's pairwise_distances on the float32 rows (as the
   package's documentation does it), timed apart, then FasterPAM on it.
   k = 10, Euclidean distance; digits and seeded samples of Fashion-MNIST.
   Prints each side's seconds, the ratios of ours to the package's FasterPAM
   alone and to matrix + FasterPAM, and the cost of each (recomputed in
   float64 from the medoids) over the package's.
2. afk-mc2 against greedy k-means++ for k-means: seeding time (from
   kmeans_gpu.verbose's progress lines: the last seeding line minus the
   "prepared" line) and the inertia of the converged fit, over three seeds.

    kmedoids_bench.py [--threads T] [--quick] [--only kmedoids|seeding]

Connects with the usual PG* environment variables; creates and drops the
database kmedoids_bench.  The kmedoids package must be importable
(test/scripts/ensure_deps.sh puts it in .deps/python).
"""
import argparse
import collections
import gzip
import io
import os
import re
import sys
import time

import kmedoids
import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import pairwise_distances

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


def fashion(n=None, seed=2026):
    parts = []
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        with gzip.open(os.path.join(FASHION, name)) as f:
            parts.append(np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 784))
    images = np.concatenate(parts) if n is None else parts[0]
    if n is not None:
        images = images[np.sort(np.random.default_rng(seed).choice(len(images), size=n, replace=False))]
    return images.astype(np.float32)


def blobs(n, d, k, seed=7):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(k, d))
    return (centers[rng.integers(0, k, size=n)] + rng.normal(0, 1.0, size=(n, d))).astype(np.float32)


def load(cur, table, X):
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} (id bigint, v real[])")
    buf = io.StringIO()
    for i, row in enumerate(X):
        buf.write(f"{i}\t{{{','.join(repr(float(x)) for x in row)}}}\n")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} (id, v) FROM STDIN", buf)
    cur.execute(f"ANALYZE {table}")


def cost_of(X, medoids, chunk=2000):
    M = X[np.asarray(medoids)].astype(np.float64)
    return sum(float(pairwise_distances(X[s:s + chunk].astype(np.float64), M).min(1).sum())
               for s in range(0, len(X), chunk))


def kmedoids_rows(cur, name, X, k, threads):
    load(cur, "kb", X)
    out = []
    ours = {}
    for method in ("alternate", "fasterpam"):
        t0 = time.time()
        cur.execute("SELECT (m).medoid_ids, (m).iterations FROM (SELECT kmedoids_fit('kb', 'v', %s, "
                    "method => %s, seed => 1, id_column => 'id') AS m) s", (k, method))
        ids, iters = cur.fetchone()
        ours[method] = (time.time() - t0, cost_of(X, ids), iters)
    t0 = time.time()
    D = pairwise_distances(X, metric="euclidean")
    t_matrix = time.time() - t0
    t0 = time.time()
    res = kmedoids.fasterpam(D, k, max_iter=100, init="random", random_state=1, n_cpu=threads)
    t_pam = time.time() - t0
    del D
    c_pkg = cost_of(X, res.medoids)
    t_pkg = t_matrix + t_pam
    out.append(f"| {name} | {len(X)} x {X.shape[1]} | {ours['alternate'][0]:.2f} ({ours['alternate'][1] / c_pkg:.4f}) "
               f"| {ours['fasterpam'][0]:.2f} ({ours['fasterpam'][1] / c_pkg:.4f}) "
               f"| {t_matrix:.2f} + {t_pam:.2f} = {t_pkg:.2f} "
               f"| {ours['fasterpam'][0] / t_pam:.2f} | {ours['fasterpam'][0] / t_pkg:.2f} |")
    print(out[-1], flush=True)
    return out


SEED_LINE = re.compile(r"kmeans: run 1/1: seeded (\d+)/(\d+) centroids(?:, potential [0-9.e+-]+)?, ([0-9.]+) s")
PREP_LINE = re.compile(r"kmeans: prepared the rows, ([0-9.]+) s")


def seeding_rows(conn, name, X, k, chain):
    cur = conn.cursor()
    load(cur, "sb", X)
    res = {}
    for init in ("k-means++", "afk-mc2"):
        times, inertias = [], []
        for seed in (1, 2, 3):
            conn.notices = collections.deque()   # every line: a list keeps only the last 50
            cur.execute("SET kmeans_gpu.\"verbose\" = on")
            cur.execute("SELECT (kmeans_fit('sb', 'v', %s, init => %s, seed => %s, chain_length => %s)).inertia",
                        (k, init, seed, chain))
            inertias.append(cur.fetchone()[0])
            cur.execute("RESET kmeans_gpu.\"verbose\"")
            text = "".join(conn.notices)
            prep = float(PREP_LINE.findall(text)[-1])
            seeded = float([m for m in SEED_LINE.findall(text) if m[0] == m[1]][-1][2])
            times.append(seeded - prep)
        res[init] = (np.median(times), np.mean(inertias))
    pp, af = res["k-means++"], res["afk-mc2"]
    line = (f"| {name} | {len(X)} x {X.shape[1]} | {k} | {pp[0]:.3f} | {af[0]:.3f} | {af[0] / pp[0]:.2f} "
            f"| {pp[1]:.6g} | {af[1]:.6g} | {af[1] / pp[1]:.4f} |")
    print(line, flush=True)
    return [line]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="smaller data sets only")
    ap.add_argument("--only", choices=["kmedoids", "seeding"], help="one of the two tables")
    args = ap.parse_args()

    admin = create_database("kmedoids_bench")
    conn = connect("kmedoids_bench")
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")
    cur.execute("SET kmeans_gpu.engine = cpu")
    cur.execute(f"SET kmeans_gpu.cpu_threads = {args.threads}")
    print(f"# {args.threads} threads for both sides (kmeans_gpu.cpu_threads, kmedoids n_cpu)")

    if args.only != "seeding":
        kmedoids_table(cur, args)
    if args.only != "kmedoids":
        seeding_table(conn, args)

    conn.close()
    admin.cursor().execute("DROP DATABASE kmedoids_bench")
    return 0


def kmedoids_table(cur, args):
    print("\nk-medoids, k = 10, l2: seconds (cost / package's cost)\n")
    print("| data | n x d | kmedoids_fit alternate | kmedoids_fit fasterpam "
          "| kmedoids package: matrix + FasterPAM = total | fasterpam / package's FasterPAM "
          "| fasterpam / package's total |")
    print("|---|---|---|---|---|---|---|")
    kmedoids_rows(cur, "digits", load_digits().data.astype(np.float32), 10, args.threads)
    kmedoids_rows(cur, "Fashion-MNIST sample", fashion(5000), 10, args.threads)
    if not args.quick:
        kmedoids_rows(cur, "Fashion-MNIST sample", fashion(20000), 10, args.threads)


def seeding_table(conn, args):
    print("\nk-means seeding, afk-mc2 (chain length 200) against greedy k-means++: "
          "median seconds of 3 seeds, mean final inertia\n")
    print("| data | n x d | k | k-means++ s | afk-mc2 s | time ratio | k-means++ inertia "
          "| afk-mc2 inertia | inertia ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    F = fashion()
    seeding_rows(conn, "Fashion-MNIST", F, 10, 200)
    seeding_rows(conn, "Fashion-MNIST", F, 100, 200)
    if not args.quick:
        B = blobs(200000, 32, 200)
        seeding_rows(conn, "blobs", B, 200, 200)
        seeding_rows(conn, "blobs", B, 1000, 200)


if __name__ == "__main__":
    sys.exit(main())
