#!/usr/bin/python3
"""Compare kmedoids_fit(method => 'fasterpam') with FasterPAM of the kmedoids
package (Schubert and Lenssen's Rust implementation, from PyPI), through SQL.

On scikit-learn's digits (1797 x 64) and on a seeded sample of 20,000
Fashion-MNIST training images (784 pixels), k = 10, Euclidean distance: the
cost of our medoids (the sum of every row's distance to its nearest medoid,
recomputed here in float64 from the medoid ids) must be within 0.5 % of the
package's (its FasterPAM on the full distance matrix, random start, fixed
random_state, one thread).  Also: our reported cost equals the recomputed
one, our labels are the nearest medoids, and the alternating method reaches a
cost no better than FasterPAM's here.  Times are in the benchmark
(test/bench/kmedoids_bench.py), not here.  Prints TAP.

Connects with the usual PG* environment variables; creates and drops the
database kmedoids_compare.
"""
import gzip
import io
import os
import sys

import kmedoids
import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import pairwise_distances

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402
from tap import Tap  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
BOUND = 1.005                   # ours <= 1.005 x the package's cost

tap = Tap()


def fashion_sample(n, seed):
    with gzip.open(FASHION) as f:
        raw = f.read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 784)
    pick = np.sort(np.random.default_rng(seed).choice(len(images), size=n, replace=False))
    return images[pick].astype(np.float32)


def load(cur, table, X):
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} (id bigint, v real[])")
    buf = io.StringIO()
    for i, row in enumerate(X):
        buf.write(f"{i}\t{{{','.join(repr(float(x)) for x in row)}}}\n")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} (id, v) FROM STDIN", buf)


def cost_of(X, medoids, chunk=2000):
    """Sum over rows of the Euclidean distance to the nearest medoid, float64."""
    M = X[np.asarray(medoids)].astype(np.float64)
    total = 0.0
    for s in range(0, len(X), chunk):
        D = pairwise_distances(X[s:s + chunk].astype(np.float64), M)
        total += float(D.min(1).sum())
    return total


def compare(cur, name, X, k):
    load(cur, "kc", X)
    shape = f"{name} (n={len(X)}, d={X.shape[1]}, k={k})"
    cur.execute("""SELECT m, (m).medoid_ids, (m).cost, (m).converged, (m).iterations
                   FROM (SELECT kmedoids_fit('kc', 'v', %s, method => 'fasterpam', seed => 1,
                                             id_column => 'id') AS m) s""", (k,))
    model, ours_ids, ours_cost, converged, iterations = cur.fetchone()
    cur.execute("""SELECT (m).medoid_ids, (m).cost
                   FROM (SELECT kmedoids_fit('kc', 'v', %s, seed => 1, id_column => 'id') AS m) s""", (k,))
    alt_ids, alt_cost = cur.fetchone()

    D = pairwise_distances(X, metric="euclidean", n_jobs=-1)   # float32 for float32 rows
    theirs = kmedoids.fasterpam(D, k, max_iter=100, init="random", random_state=1, n_cpu=1)
    del D
    theirs_cost = cost_of(X, theirs.medoids)
    ours_recomputed = cost_of(X, ours_ids)
    alt_recomputed = cost_of(X, alt_ids)

    ratio = ours_recomputed / theirs_cost
    tap.check(ratio <= BOUND,
              f"{shape}: fasterpam cost within 0.5 % of the kmedoids package's (ratio {ratio:.5f})",
              f"ours {ours_recomputed!r}, package {theirs_cost!r}")
    tap.check(abs(ours_cost - ours_recomputed) <= 1e-6 * ours_recomputed,
              f"{shape}: the model's cost is the sum of the distances to the medoids",
              f"model {ours_cost!r}, recomputed {ours_recomputed!r}")
    tap.check(bool(converged), f"{shape}: fasterpam converged ({iterations} passes)")
    tap.check(ours_recomputed <= alt_recomputed * (1 + 1e-9),
              f"{shape}: alternate's cost ({alt_recomputed / theirs_cost:.5f} x the package's) "
              f"is no better than fasterpam's",
              f"alternate {alt_recomputed!r}, fasterpam {ours_recomputed!r}")
    cur.execute("SELECT id, cluster_id FROM kmedoids_labels(%s::kmedoids_model, 'kc', 'v', 'id') ORDER BY id",
                (model,))
    labels = np.array([r[1] for r in cur.fetchall()])
    M = X[np.asarray(ours_ids)].astype(np.float64)
    nearest_ok = True
    for s in range(0, len(X), 2000):
        Dm = pairwise_distances(X[s:s + 2000].astype(np.float64), M)
        got = Dm[np.arange(len(Dm)), labels[s:s + 2000]]
        nearest_ok &= bool(np.all(got <= Dm.min(1) * (1 + 1e-9)))
    tap.check(nearest_ok, f"{shape}: every label is the nearest medoid")
    print(f"# {shape}: cost ours {ours_recomputed:.6g}, kmedoids package {theirs_cost:.6g}, "
          f"alternate {alt_recomputed:.6g}")


def main():
    admin = create_database("kmedoids_compare")
    conn = connect("kmedoids_compare")
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")
    cur.execute("SET kmeans_gpu.engine = cpu")

    compare(cur, "digits", load_digits().data.astype(np.float32), 10)
    if os.path.exists(FASHION):
        compare(cur, "Fashion-MNIST sample", fashion_sample(20000, 2026), 10)
    else:
        tap.check(False, f"Fashion-MNIST: {FASHION} is missing (dataset-fashion-mnist)")

    conn.close()
    admin.cursor().execute("DROP DATABASE kmedoids_compare")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
