#!/usr/bin/python3
"""Compare kmeans_gpu with scikit-learn's Lloyd k-means, through SQL.

For each dataset: the same float32 rows and the same explicit start
centroids go to kmeans_fit (tol 0) and to sklearn.cluster.KMeans
(algorithm='lloyd', n_init=1, tol=0).  Labels (from kmeans_labels) must be
identical row for row, inertia equal within 1e-5 relative, centroids within
1e-4, and both must stop after the same number of iterations.  Also checks
that kmeans_gpu.verbose reports every iteration.  Prints TAP.

Connects with the usual PG* environment variables; creates and drops the
database kmeans_compare.
"""
import gzip
import io
import os
import re
import sys

import numpy as np
from sklearn.cluster import KMeans

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402
from tap import Tap  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

tap = Tap()


def blobs(rng, n, d, k, spread):
    centers = rng.uniform(-10, 10, size=(k, d))
    which = rng.integers(0, k, size=n)
    return (centers[which] + rng.normal(0, spread, size=(n, d))).astype(np.float32)


def fashion(n):
    with gzip.open(FASHION) as f:
        raw = f.read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 784)
    return images[:n].astype(np.float32) / 255.0


def array_literal(rows):
    return "{" + ",".join("{" + ",".join(repr(x) for x in r.tolist()) + "}" for r in rows) + "}"


def load(cur, table, X, w=None):
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} (id bigint, v real[], w float8)")
    buf = io.StringIO()
    for i, row in enumerate(X):
        weight = "\\N" if w is None else repr(float(w[i]))
        buf.write(f"{i}\t{{{','.join(repr(x) for x in row.tolist())}}}\t{weight}\n")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} (id, v, w) FROM STDIN", buf)


def compare(cur, name, X, k, max_iter, rng, w=None):
    init = X[rng.choice(len(X), size=k, replace=False)]
    load(cur, "cmp", X, w)
    cur.execute(
        """SELECT (m).iterations, (m).inertia, (m).centroids, (m).converged, m
           FROM (SELECT kmeans_fit('cmp', 'v', %s, max_iter => %s, tol => 0,
                                   init_centroids => %s::real[], weight_column => %s) AS m) q""",
        (k, max_iter, array_literal(init), None if w is None else "w"))
    iterations, inertia, centroids, converged, model = cur.fetchone()
    cur.execute("SELECT id, cluster_id FROM kmeans_labels(%s::kmeans_model, 'cmp', 'v', 'id') ORDER BY id",
                (model,))
    labels = np.array([r[1] for r in cur.fetchall()])
    centroids = np.array(centroids, dtype=np.float64)

    km = KMeans(n_clusters=k, init=init, n_init=1, max_iter=max_iter, tol=0,
                algorithm="lloyd").fit(X, sample_weight=w)
    shape = f"{name} (n={len(X)}, d={X.shape[1]}, k={k})"
    differ = int(np.sum(labels != km.labels_))
    tap.check(differ == 0, f"{shape}: same labels as scikit-learn",
              f"{differ} of {len(X)} labels differ")
    rel = abs(inertia - km.inertia_) / km.inertia_
    tap.check(rel <= 1e-5, f"{shape}: inertia within 1e-5 (relative difference {rel:.2e})",
              f"ours {inertia!r}, scikit-learn {km.inertia_!r}")
    scale = max(1.0, float(np.abs(km.cluster_centers_).max()))
    err = float(np.abs(centroids - km.cluster_centers_).max()) / scale
    tap.check(err <= 1e-4, f"{shape}: centroids within 1e-4 (largest difference {err:.2e})")
    tap.check(iterations == km.n_iter_, f"{shape}: same number of iterations ({iterations})",
              f"ours {iterations}, scikit-learn {km.n_iter_}")


def check_verbose(conn):
    cur = conn.cursor()
    del conn.notices[:]
    cur.execute("SET kmeans_gpu.\"verbose\" = on")
    cur.execute("SELECT (kmeans_fit('cmp', 'v', 4, max_iter => 3, tol => 0, seed => 1)).iterations")
    iterations = cur.fetchone()[0]
    cur.execute("RESET kmeans_gpu.\"verbose\"")
    text = "".join(conn.notices)
    lines = re.findall(r"INFO:  kmeans: run 1/1, iteration (\d+): inertia [0-9.e+-]+, moved [0-9.]+(?:, [a-z -]+)?, [0-9.]+ s", text)
    tap.check(lines == [str(i) for i in range(1, iterations + 1)],
              "kmeans_gpu.verbose reports every iteration with inertia, moved fraction and time", text)
    tap.check(re.search(r"INFO:  kmeans: \d+ vectors of \d+ values into 4 clusters", text) is not None,
              "kmeans_gpu.verbose announces the fit", text)
    # k-means++'s potential (sum of w D2 to the seeds) is what the first iteration's assignment
    # costs; both are printed to six digits
    seeded = re.findall(r"INFO:  kmeans: run 1/1: seeded (\d+)/4 centroids, potential ([0-9.e+-]+), [0-9.]+ s", text)
    first = re.search(r"INFO:  kmeans: run 1/1, iteration 1: inertia ([0-9.e+-]+),", text)
    tap.check(len(seeded) > 0 and seeded[-1][0] == "4" and first is not None and
              abs(float(seeded[-1][1]) - float(first.group(1))) <= 2e-5 * float(first.group(1)),
              "kmeans_gpu.verbose reports k-means++'s potential, the cost of the first assignment", text)

    # five distinct rows repeated: the five seeds cover them exactly and the potential is 0, which
    # the line prints; random seeds and k = 1 have no potential to print
    base = np.random.default_rng(7).uniform(0, 10, size=(5, 3)).astype(np.float32)
    load(cur, "dup", np.repeat(base, 40, axis=0))
    for args, want, name in (
            ("5, seed => 1", r"INFO:  kmeans: run 1/1: seeded 5/5 centroids, potential 0, ",
             "kmeans_gpu.verbose prints a potential of 0 (rows the k-means++ seeds cover exactly)"),
            ("1, seed => 1", r"INFO:  kmeans: run 1/1: seeded 1/1 centroids, [0-9.]+ s",
             "kmeans_gpu.verbose prints no potential for k-means++ with one centroid"),
            ("5, seed => 1, init => 'random'", None,
             "kmeans_gpu.verbose prints no potential for random seeds")):
        del conn.notices[:]
        cur.execute("SET kmeans_gpu.\"verbose\" = on")
        cur.execute(f"SELECT (kmeans_fit('dup', 'v', {args}, max_iter => 1)).k")
        cur.execute("RESET kmeans_gpu.\"verbose\"")
        text = "".join(conn.notices)
        if want is not None:
            found = re.search(want, text) is not None
        else:
            found = "potential" not in text and "INFO:  kmeans: run 1/1, iteration 1" in text
        tap.check(found, name, text)


def check_threads(cur, conn, rng):
    """The verbose line names the threads the CPU engine really runs: four for
    the shape of test/tap/40_seed.sql's thread check (which compares one
    thread with four, and would compare nothing below the engine's parallel
    threshold), one for a small fit."""
    for n, d, k, want in ((20000, 16, 32, "4 threads"), (3000, 3, 12, "1 thread")):
        load(cur, "thr", rng.uniform(0, 10, size=(n, d)).astype(np.float32))
        del conn.notices[:]
        cur.execute("SET kmeans_gpu.\"verbose\" = on")
        cur.execute("SET kmeans_gpu.cpu_threads = 4")
        cur.execute("SELECT (kmeans_fit('thr', 'v', %s, max_iter => 1, seed => 1, engine => 'cpu')).k", (k,))
        cur.execute("RESET kmeans_gpu.cpu_threads")
        cur.execute("RESET kmeans_gpu.\"verbose\"")
        text = "".join(conn.notices)
        tap.check(re.search(rf"into {k} clusters, .*engine cpu \({want}\)", text) is not None,
                  f"kmeans_gpu.cpu_threads = 4, (n={n}, d={d}, k={k}): the CPU engine runs {want}", text)


def main():
    admin = create_database("kmeans_compare")
    conn = connect("kmeans_compare")
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")

    rng = np.random.default_rng(2026)
    compare(cur, "blobs", blobs(rng, 3000, 2, 6, 2.0), 6, 100, rng)
    compare(cur, "blobs", blobs(rng, 6000, 16, 20, 3.0), 20, 50, rng)
    compare(cur, "uniform", rng.uniform(0, 1, size=(4000, 5)).astype(np.float32), 12, 30, rng)
    compare(cur, "offset", (blobs(rng, 3000, 8, 5, 1.0) + 1000).astype(np.float32), 5, 50, rng)
    compare(cur, "weighted", blobs(rng, 3000, 4, 7, 2.5), 7, 50, rng,
            w=rng.integers(1, 5, size=3000).astype(np.float64))
    compare(cur, "many clusters", blobs(rng, 5000, 32, 40, 4.0), 200, 20, rng)
    # The data set is a dependency (ensure_deps.sh installs it): missing, it fails.
    if os.path.exists(FASHION):
        compare(cur, "Fashion-MNIST", fashion(6000), 10, 40, rng)
    else:
        tap.check(False, "Fashion-MNIST (n=6000, d=784, k=10): the data set is there",
                  f"{FASHION} is missing: install the Debian package dataset-fashion-mnist")
    check_verbose(conn)
    check_threads(cur, conn, rng)

    conn.close()
    admin.cursor().execute("DROP DATABASE kmeans_compare")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
