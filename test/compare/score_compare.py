#!/usr/bin/python3
"""Compare kmeans_score and kmeans_sweep with scikit-learn's metrics, through SQL.

For k-means and k-medoids models (every metric, sqfd included) on several data
sets: the labels come from kmeans_labels / kmedoids_labels, and scikit-learn's
silhouette_score, davies_bouldin_score and calinski_harabasz_score, computed
on the same rows, must equal kmeans_score's figures within 1e-6 relative; the
inertia must equal the model's objective recomputed here in float64.  The
sampled silhouette is checked on the very rows kmeans_score samples: this
script draws them with its own copy of the sample keys (km_hash.h:
km_row_hash, km_stream and km_mix64, in Python integers).  sqfd distances are
recomputed here with numpy, so the silhouette of an sqfd model also checks
the metric itself.  kmeans_sweep's figures for each k must equal scikit-learn's
on the model it returns.  Prints TAP.

Connects with the usual PG* environment variables; creates and drops the
database kmeans_score_compare.
"""
import gzip
import io
import os
import struct
import sys

import numpy as np
from sklearn.metrics import (calinski_harabasz_score, davies_bouldin_score,
                             silhouette_score)
from sklearn.preprocessing import normalize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402
from tap import Tap  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
M64 = (1 << 64) - 1
TOL = 1e-6

tap = Tap()


# --- the sample keys of kmeans_score (src/engine/km_hash.h, src/kmedoids_input.c)

def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def row_hash(values):
    """km_row_hash of a row of float32 values, weight 1."""
    bits = np.asarray(values, dtype=np.float32).ravel().view(np.uint32).tolist()
    d = len(bits)
    h = 0x9e3779b97f4a7c15 ^ d
    i = 0
    while i + 1 < d:
        pair = (bits[i + 1] << 32) | bits[i]
        h = ((h ^ pair) * 0xff51afd7ed558ccd) & M64
        h ^= h >> 29
        i += 2
    if i < d:
        h = ((h ^ bits[i]) * 0xff51afd7ed558ccd) & M64
        h ^= h >> 29
    h ^= struct.unpack("<I", struct.pack("<f", 1.0))[0] << 17
    return mix64(h)


def score_stream(seed):
    """km_stream(seed, 0, 1 << 38): the stream of kmeans_score's sample keys."""
    return (mix64((mix64((seed & M64) ^ 0x5851f42d4c957f2d) + (1 << 38)) & M64))


def sample_order(rows, seed):
    """Indices of rows in kmeans_score's canonical order: largest
    km_mix64(hash ^ stream) first."""
    stream = score_stream(seed)
    keys = [mix64(row_hash(r) ^ stream) for r in rows]
    return sorted(range(len(rows)), key=lambda i: -keys[i])


# --- data

def blobs(rng, n, d, k, spread):
    centers = rng.uniform(-10, 10, size=(k, d))
    which = rng.integers(0, k, size=n)
    return (centers[which] + rng.normal(0, spread, size=(n, d))).astype(np.float32)


def fashion(n):
    with gzip.open(FASHION) as f:
        raw = f.read()
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 784)
    return images[:n].astype(np.float32)


def load(cur, table, rows, sig=False):
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} (id bigint, v real[])")
    buf = io.StringIO()
    for i, row in enumerate(rows):
        if sig:
            text = "{" + ",".join("{" + ",".join(repr(float(x)) for x in f) + "}" for f in row) + "}"
        else:
            text = "{" + ",".join(repr(float(x)) for x in row) + "}"
        buf.write(f"{i}\t{text}\n")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} (id, v) FROM STDIN", buf)


def signatures(rng, n, k, fd):
    """Signatures of 1 to 5 features of fd values (weight, coordinates) around k prototypes."""
    protos = rng.uniform(-3, 3, size=(k, fd - 1))
    out = []
    for _ in range(n):
        c = rng.integers(0, k)
        m = int(rng.integers(1, 6))
        feats = np.empty((m, fd), dtype=np.float32)
        feats[:, 0] = rng.uniform(0.2, 1.5, size=m)
        feats[:, 1:] = protos[c] + rng.normal(0, 0.4, size=(m, fd - 1))
        out.append(feats)
    return out


def sqfd_matrix(sigs, alpha):
    """SQFD between every pair of signatures, in float64 with numpy."""
    n = len(sigs)

    def q(a, b):
        d2 = ((a[:, None, 1:].astype(np.float64) - b[None, :, 1:].astype(np.float64)) ** 2).sum(-1)
        return float(a[:, 0].astype(np.float64) @ np.exp(-alpha * d2) @ b[:, 0].astype(np.float64))

    self_q = [q(s, s) for s in sigs]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            D[i, j] = D[j, i] = np.sqrt(max(0.0, self_q[i] + self_q[j] - 2 * q(sigs[i], sigs[j])))
    return D


# --- checks

def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOL * max(abs(a), abs(b), 1e-300)


def labels_of(cur, fn, model, table):
    cur.execute(f"SELECT id, cluster_id FROM {fn}(%s, '{table}', 'v', 'id') ORDER BY id", (model,))
    return np.array([r[1] for r in cur.fetchall()])


def check(cur, name, rows, labels, score, metric, inertia, sample=None, seed=None,
          distances=None, db_rows=None):
    """score: (inertia, silhouette, davies_bouldin, calinski_harabasz, n_scored)."""
    n = len(rows)
    idx = list(range(n)) if sample is None or sample >= n else sample_order(rows, seed)[:sample]
    lab = labels[idx]
    if distances is not None:
        sil = silhouette_score(distances[np.ix_(idx, idx)], lab, metric="precomputed")
    else:
        X = np.asarray([rows[i] for i in idx], dtype=np.float64)
        sil = silhouette_score(X, lab, metric=metric)
    tap.check(score[4] == len(idx), f"{name}: n_scored = {len(idx)}", f"got {score[4]}")
    tap.check(close(score[1], sil), f"{name}: silhouette = scikit-learn's within 1e-6 ({sil:.10f})",
              f"ours {score[1]!r}, scikit-learn {sil!r}")
    tap.check(close(score[0], inertia), f"{name}: inertia = the objective recomputed in float64",
              f"ours {score[0]!r}, here {inertia!r}")
    if db_rows is None:
        tap.check(score[2] is None and score[3] is None, f"{name}: no Davies-Bouldin or Calinski-Harabasz")
        return
    db = davies_bouldin_score(db_rows, labels)
    ch = calinski_harabasz_score(db_rows, labels)
    tap.check(close(score[2], db), f"{name}: Davies-Bouldin = scikit-learn's within 1e-6 ({db:.10f})",
              f"ours {score[2]!r}, scikit-learn {db!r}")
    tap.check(close(score[3], ch), f"{name}: Calinski-Harabasz = scikit-learn's within 1e-6 ({ch:.6f})",
              f"ours {score[3]!r}, scikit-learn {ch!r}")


def kmeans_case(cur, name, X, k, metric="l2", sample=None, seed=7):
    load(cur, "sc", X)
    cur.execute("SELECT kmeans_fit('sc', 'v', %s, seed => 3, metric => %s)", (k, metric))
    model = cur.fetchone()[0]
    labels = labels_of(cur, "kmeans_labels", model, "sc")
    cur.execute("SELECT (%s::kmeans_model).centroids", (model,))
    C = np.asarray(cur.fetchone()[0], dtype=np.float64)
    X64 = X.astype(np.float64)
    if metric == "cosine":
        U = normalize(X64)
        Cn = normalize(C)
        inertia = float((1.0 - (U * Cn[labels]).sum(1)).sum())
        db_rows = U
    else:
        inertia = float(((X64 - C[labels]) ** 2).sum())
        db_rows = X64
    args = "" if sample is None else f", sample => {sample}, seed => {seed}"
    cur.execute(f"SELECT * FROM kmeans_score(%s::kmeans_model, 'sc', 'v'{args})", (model,))
    score = cur.fetchone()
    check(cur, f"{name} k-means {metric} (n={len(X)}, k={k}{', sample ' + str(sample) if sample else ''})",
          X, labels, score, "cosine" if metric == "cosine" else "euclidean", inertia,
          sample=sample, seed=seed, db_rows=db_rows)


SK_METRIC = {"l2": "euclidean", "sqeuclidean": "sqeuclidean", "l1": "manhattan", "cosine": "cosine"}


def kmedoids_case(cur, name, X, k, metric, method="alternate", sample=None, seed=5):
    load(cur, "sc", X)
    cur.execute("SELECT kmedoids_fit('sc', 'v', %s, metric => %s, method => %s, seed => 2, id_column => 'id')",
                (k, metric, method))
    model = cur.fetchone()[0]
    labels = labels_of(cur, "kmedoids_labels", model, "sc")
    cur.execute("SELECT (%s::kmedoids_model).medoid_ids", (model,))
    med = np.asarray(cur.fetchone()[0])
    X64 = X.astype(np.float64)
    from sklearn.metrics import pairwise_distances
    D = pairwise_distances(X64, X64[med], metric=SK_METRIC[metric])
    inertia = float(D[np.arange(len(X)), labels].sum())
    tap.check(bool(np.all(D[np.arange(len(X)), labels] <= D.min(1) * (1 + 1e-9) + 1e-12)),
              f"{name} k-medoids {metric}: every label is the nearest medoid")
    args = "" if sample is None else f", sample => {sample}, seed => {seed}"
    cur.execute(f"SELECT * FROM kmeans_score(%s::kmedoids_model, 'sc', 'v'{args})", (model,))
    score = cur.fetchone()
    check(cur, f"{name} k-medoids {metric} {method} (n={len(X)}, k={k}{', sample ' + str(sample) if sample else ''})",
          X, labels, score, SK_METRIC[metric], inertia, sample=sample, seed=seed,
          db_rows=normalize(X64) if metric == "cosine" else X64)


def sqfd_case(cur, rng):
    sigs = signatures(rng, 400, 4, 4)
    load(cur, "sg", sigs, sig=True)
    alpha = 0.7
    cur.execute("SELECT kmedoids_fit('sg', 'v', 4, metric => 'sqfd', alpha => %s, seed => 1, id_column => 'id')",
                (alpha,))
    model = cur.fetchone()[0]
    labels = labels_of(cur, "kmedoids_labels", model, "sg")
    cur.execute("SELECT (%s::kmedoids_model).medoid_ids", (model,))
    med = np.asarray(cur.fetchone()[0])
    D = sqfd_matrix(sigs, alpha)
    inertia = float(D[np.arange(len(sigs)), med[labels]].sum())
    tap.check(bool(np.all(D[np.arange(len(sigs)), med[labels]] <= D[:, med].min(1) + 1e-9)),
              "sqfd k-medoids: every label is the nearest medoid by numpy's SQFD")
    cur.execute("SELECT * FROM kmeans_score(%s::kmedoids_model, 'sg', 'v')", (model,))
    check(cur, "signatures k-medoids sqfd (n=400, k=4)", sigs, labels, cur.fetchone(), None, inertia,
          distances=D)
    cur.execute("SELECT * FROM kmeans_score(%s::kmedoids_model, 'sg', 'v', sample => 150, seed => 9)", (model,))
    check(cur, "signatures k-medoids sqfd (n=400, k=4, sample 150)", sigs, labels, cur.fetchone(), None,
          inertia, sample=150, seed=9, distances=D)


def sweep_case(cur, X):
    load(cur, "sw", X)
    cur.execute("""SELECT k, inertia, silhouette, davies_bouldin, model
                   FROM kmeans_sweep('sw', 'v', ARRAY[2, 3, 5, 8], seed => 4, sample => 500) ORDER BY k""")
    ok_sil = ok_db = ok_inertia = True
    diag = []
    for k, inertia, sil, db, model in cur.fetchall():
        labels = labels_of(cur, "kmeans_labels", model, "sw")
        cur.execute("SELECT (%s::kmeans_model).centroids", (model,))
        C = np.asarray(cur.fetchone()[0], dtype=np.float64)
        X64 = X.astype(np.float64)
        idx = sample_order(X, 4)[:500]
        s = silhouette_score(X64[idx], labels[idx])
        d = davies_bouldin_score(X64, labels)
        i = float(((X64 - C[labels]) ** 2).sum())
        ok_sil &= close(sil, s)
        ok_db &= close(db, d)
        ok_inertia &= abs(inertia - i) <= 1e-5 * i
        diag.append(f"k={k}: silhouette {sil!r} vs {s!r}, DB {db!r} vs {d!r}, inertia {inertia!r} vs {i!r}")
    tap.check(ok_sil, "kmeans_sweep: every k's silhouette (sample 500) = scikit-learn's within 1e-6",
              "\n".join(diag))
    tap.check(ok_db, "kmeans_sweep: every k's Davies-Bouldin = scikit-learn's within 1e-6", "\n".join(diag))
    tap.check(ok_inertia, "kmeans_sweep: every k's inertia = the model's objective within 1e-5",
              "\n".join(diag))


def check_verbose(conn, X):
    """kmeans_gpu.verbose: a line per round (alternate) or pass (fasterpam)."""
    import collections
    import re
    cur = conn.cursor()
    load(cur, "vb", X)
    for method, word in (("alternate", "round"), ("fasterpam", "pass")):
        conn.notices = collections.deque()
        cur.execute("SET kmeans_gpu.\"verbose\" = on")
        cur.execute("SELECT (m).iterations, (m).converged FROM (SELECT kmedoids_fit('vb', 'v', 5, seed => 1, "
                    "method => %s) AS m) s", (method,))
        iterations, converged = cur.fetchone()
        cur.execute("RESET kmeans_gpu.\"verbose\"")
        text = "".join(conn.notices)
        pattern = (r"INFO:  kmedoids: round (\d+): cost [0-9.e+]+, moved [0-9.]+, medoids changed \d+, [0-9.]+ s"
                   if method == "alternate" else
                   r"INFO:  kmedoids: pass (\d+): cost [0-9.e+]+, swaps \d+, [0-9.]+ s")
        lines = re.findall(pattern, text)
        tap.check(lines == [str(i) for i in range(1, iterations + 1)] and "final assignment done" in text,
                  f"kmeans_gpu.verbose reports every {word} of {method} ({iterations})", text)
        tap.check(re.search(r"INFO:  kmedoids: \d+ rows of \d+ values into 5 clusters, metric l2, method "
                            + method, text) is not None, f"kmeans_gpu.verbose announces the {method} fit", text)


def main():
    admin = create_database("kmeans_score_compare")
    conn = connect("kmeans_score_compare")
    cur = conn.cursor()
    cur.execute("CREATE EXTENSION kmeans_gpu")
    cur.execute("SET kmeans_gpu.engine = cpu")

    rng = np.random.default_rng(2027)
    A = blobs(rng, 1500, 4, 5, 1.5)
    B = blobs(rng, 2500, 12, 8, 3.0)
    kmeans_case(cur, "blobs", A, 5)
    kmeans_case(cur, "blobs", A, 5, metric="cosine")
    kmeans_case(cur, "blobs", B, 8, sample=700, seed=11)
    kmeans_case(cur, "blobs", B, 3)
    for metric in ("l2", "sqeuclidean", "l1", "cosine"):
        kmedoids_case(cur, "blobs", A, 5, metric)
    kmedoids_case(cur, "blobs", B, 8, "l2", method="fasterpam", sample=600, seed=3)
    kmedoids_case(cur, "blobs", B, 6, "l1", sample=900, seed=12)
    sqfd_case(cur, rng)
    sweep_case(cur, B)
    check_verbose(conn, A)
    if os.path.exists(FASHION):
        F = fashion(3000)
        kmeans_case(cur, "Fashion-MNIST", F, 10, sample=1000, seed=1)
        kmedoids_case(cur, "Fashion-MNIST", F, 10, "l2", method="fasterpam")

    conn.close()
    admin.cursor().execute("DROP DATABASE kmeans_score_compare")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
