#!/usr/bin/env python3
"""k-medoids, CPU = GPU: the same rows and seed give the same model on both
engines, through SQL.

For each shape and metric, kmedoids_fit runs with engine => 'cpu' and
engine => 'gpu' from the same seed (the GPU fit is seeded on the host, as
the CPU fit is, then runs the alternating method on the device): medoids,
medoid_ids, medoid_features, sizes, cost, cluster_cost, iterations and
converged must be identical (SQL equality of the stored values, no
tolerance), and so must every row's label and distance from kmedoids_labels.
The aggregate too; sqfd signatures of 1 to 8 features; clusters of one row
beside clusters of thousands; k > 64 with few rows.  kmeans_score's
silhouette on the GPU equals the CPU engine's.  Then a long GPU fit is
canceled (statement_timeout and pg_cancel_backend during its rounds): it
must end within 1 s, leave the session usable and give back the device's
memory.  Prints TAP, and the fit times of both engines as diagnostics.
Runs on the GPU machine after `source .devbundle/up` (PG* variables set).
"""
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgload import load, psql  # noqa: E402
from tap import Tap  # noqa: E402

DB = "kmeans_gpu_kmedoids"
# a dry run on a machine without a GPU: KM_SECOND_ENGINE=cpu
SECOND = os.environ.get("KM_SECOND_ENGINE", "gpu")
tap = Tap(diag_lines=30)

SAME = ("(c).medoids = (g).medoids AND (c).medoid_ids IS NOT DISTINCT FROM (g).medoid_ids "
        "AND (c).medoid_features IS NOT DISTINCT FROM (g).medoid_features "
        "AND (c).sizes = (g).sizes AND (c).cost = (g).cost AND (c).cluster_cost = (g).cluster_cost "
        "AND (c).iterations = (g).iterations AND (c).converged = (g).converged")


def blobs(rng, n, d, k, spread=1.0):
    centers = rng.uniform(-10, 10, size=(k, d))
    return (centers[rng.integers(0, k, size=n)] + rng.normal(0, spread, size=(n, d))).astype(np.float32)


def load_signatures(table, rng, n, fd, maxm, k):
    """CREATE TABLE table (id bigint, v real[]) of signatures: 1 to maxm
    features of fd values (weight, then coordinates) around k prototypes,
    every 5th a copy of an earlier one with its features reversed."""
    lines = []
    sigs = []
    for i in range(n):
        if i >= 10 and i % 5 == 0:
            s = sigs[int(rng.integers(0, i))][::-1]
        else:
            m = int(rng.integers(1, maxm + 1))
            base = float(rng.integers(0, k))
            s = [[float(np.float32(0.05 + rng.random()))] +
                 [float(np.float32(base + 0.4 * rng.normal() + 0.1 * f)) for _ in range(fd - 1)]
                 for f in range(m)]
        sigs.append(s)
        lines.append(f"{i}\t{{" + ",".join("{" + ",".join(repr(x) for x in f) + "}" for f in s) + "}")
    psql(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id bigint, v real[])", DB)
    psql(f"COPY {table} (id, v) FROM STDIN", DB, stdin=("\n".join(lines) + "\n").encode())


def compare(name, table, k, metric, extra=""):
    """kmedoids_fit on both engines from the same seed; every field and every label."""
    args = f"'{table}', 'v', {k}, metric => '{metric}', seed => 7, id_column => 'id'{extra}"
    t0 = time.time()
    psql(f"DROP TABLE IF EXISTS fits; CREATE TABLE fits AS "
         f"SELECT kmedoids_fit({args}, engine => 'cpu') AS c", DB)
    t_cpu = time.time() - t0
    t0 = time.time()
    psql(f"ALTER TABLE fits ADD COLUMN g kmedoids_model; "
         f"UPDATE fits SET g = kmedoids_fit({args}, engine => '{SECOND}')", DB)
    t_gpu = time.time() - t0
    row = psql(f"SELECT (g).engine, {SAME}, (c).iterations, (c).cost, (g).cost, "
               "array_length((c).sizes, 1) FROM fits", DB)
    engine, same, iters, cc, gc, kk = row.split("|")
    n = psql(f"SELECT count(*) FROM {table}", DB)
    shape = f"{name} (n={n}, k={k}, {metric}{extra})"
    tap.check(engine == SECOND, f"{shape}: the {SECOND} engine ran", row)
    tap.check(same == "t", f"{shape}: identical model ({iters} rounds, cost {gc})",
              psql("SELECT (c).medoid_ids, (g).medoid_ids, (c).sizes, (g).sizes, (c).cost, (g).cost, "
                   "(c).iterations, (g).iterations FROM fits", DB))
    differ = psql(f"SELECT count(*) FROM kmedoids_labels((SELECT c FROM fits), '{table}', 'v', 'id') a "
                  f"FULL JOIN kmedoids_labels((SELECT g FROM fits), '{table}', 'v', 'id') b USING (id) "
                  "WHERE a.cluster_id IS DISTINCT FROM b.cluster_id "
                  "OR a.distance IS DISTINCT FROM b.distance", DB)
    tap.check(differ == "0", f"{shape}: every row's label and distance identical", f"{differ} differ")
    print(f"# {shape}: fit cpu {t_cpu:.3f} s, {SECOND} {t_gpu:.3f} s (ratio {t_cpu / max(t_gpu, 1e-9):.1f})")
    sys.stdout.flush()


def compare_aggregate(table, k, metric):
    opts = f'"seed": 3, "metric": "{metric}", "max_iter": 50'
    row = psql(f"SELECT (g).engine, {SAME} FROM (SELECT "
               f"kmedoids(v, {k}, '{{{opts}, \"engine\": \"cpu\"}}') AS c, "
               f"kmedoids(v, {k}, '{{{opts}, \"engine\": \"{SECOND}\"}}') AS g FROM {table}) f", DB)
    tap.check(row == f"{SECOND}|t", f"aggregate on {table} (k={k}, {metric}): identical model on the {SECOND}",
              row)


def compare_silhouette(table, k, metric):
    psql(f"DROP TABLE IF EXISTS sm; SET kmeans_gpu.engine = cpu; CREATE TABLE sm AS "
         f"SELECT m, (kmeans_score(m, '{table}', 'v', sample => 3000)).silhouette AS s "
         f"FROM (SELECT kmedoids_fit('{table}', 'v', {k}, metric => '{metric}', seed => 5) AS m) f", DB)
    row = psql(f"SET kmeans_gpu.engine = {SECOND}; "
               f"SELECT (kmeans_score(m, '{table}', 'v', sample => 3000)).silhouette = s, s FROM sm", DB)
    tap.check(row.startswith("t|"), f"kmeans_score on {table} (k={k}, {metric}): the {SECOND}'s silhouette "
              f"is the CPU engine's ({row.split('|')[-1]})", row)


WARM = f"""
SELECT (kmedoids_fit('small', 'v', 2, seed => 1, engine => '{SECOND}')).engine AS warm_engine \\gset
SELECT free_memory AS before FROM kmeans_gpu_devices() WHERE device = 0 \\gset
"""


def timed_cancel(name, statement, timeout_ms):
    """statement_timeout during a long GPU k-medoids fit: ends within 1 s,
    the session is usable, the device's free memory is back."""
    script = WARM + f"""
SET statement_timeout = '{timeout_ms}ms';
SELECT clock_timestamp() AS t0 \\gset
{statement};
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS took \\gset
RESET statement_timeout;
SELECT 41 + 1 AS usable \\gset
SELECT free_memory AS after FROM kmeans_gpu_devices() WHERE device = 0 \\gset
\\echo RESULT :warm_engine :took :usable :before :after
"""
    r = subprocess.run(["psql", "-X", "-q", "-d", DB, "-f", "-"], input=script.encode(),
                       capture_output=True)
    out = r.stdout.decode() + r.stderr.decode()
    m = re.search(r"RESULT (\S+) (\S+) (\S+) (\S+) (\S+)", out)
    if not m:
        tap.check(False, f"{name}: the script ran", out)
        return
    engine, took, usable, before, after = m.groups()
    late = float(took) - timeout_ms / 1000.0
    canceled = "canceling statement due to statement timeout" in out
    tap.check(engine == SECOND and canceled, f"{name}: statement_timeout canceled the k-medoids fit", out)
    tap.check(late < 1.0, f"{name}: it ended {late:.3f} s after the timeout", out)
    tap.check(usable == "42", f"{name}: the session is usable afterwards", out)
    diff = int(before) - int(after)
    tap.check(abs(diff) < 16 << 20, f"{name}: GPU free memory back where it was ({diff} bytes apart)", out)


def backend_cancel():
    """pg_cancel_backend once the fit reports its first round (the
    assignment done, the score running)."""
    long_fit = ("SET application_name = 'kmedoids_cancel_me'; SET kmeans_gpu.\"verbose\" = on; "
                f"SELECT kmedoids_fit('big', 'v', 2, init => 'random', seed => 1, max_iter => 1000, "
                f"engine => '{SECOND}');")
    p = subprocess.Popen(["psql", "-X", "-q", "-d", DB, "-c", long_fit],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    for line in p.stdout:
        seen.append(line.decode())
        if "round 1:" in seen[-1]:
            break
    time.sleep(0.5)
    t_cancel = time.time()
    n = psql("SELECT count(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'kmedoids_cancel_me') x", DB)
    out = "".join(seen) + p.communicate(timeout=120)[0].decode()
    late = time.time() - t_cancel
    tap.check(n == "1" and "canceling statement due to user request" in out,
              "pg_cancel_backend canceled a GPU k-medoids fit in its rounds", out[-2000:])
    tap.check(late < 1.0, f"pg_cancel_backend: it ended {late:.3f} s after the cancel", out[-2000:])


def main():
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    psql("ALTER DATABASE " + DB + " SET extra_float_digits = 3")
    rng = np.random.default_rng(11)

    load("t_small", blobs(rng, 200, 2, 3), DB)
    compare("blobs", "t_small", 3, "l2")
    load("t_mid", blobs(rng, 5000, 8, 10, 1.5), DB)
    for metric in ("l2", "sqeuclidean", "l1", "cosine"):
        compare("blobs", "t_mid", 10, metric)
    load("t_wide", blobs(rng, 3000, 784, 10, 30.0), DB)
    compare("blobs", "t_wide", 10, "sqeuclidean")
    compare("blobs", "t_wide", 10, "l2", ", init => 'afk-mc2'")
    load("t_64", blobs(rng, 20000, 64, 20, 3.0), DB)
    compare("blobs", "t_64", 20, "l2")
    compare("blobs", "t_64", 20, "cosine", ", init => 'random'")
    load("t_big_clusters", blobs(rng, 30000, 16, 5, 2.0), DB)
    compare("blobs", "t_big_clusters", 5, "l1")
    load("t_many", blobs(rng, 100000, 4, 200, 0.3), DB)
    compare("blobs", "t_many", 200, "l2", ", max_iter => 20")
    load("t_tiny_clusters", blobs(rng, 2000, 3, 500, 0.5), DB)
    compare("blobs", "t_tiny_clusters", 1500, "l2", ", max_iter => 10")
    grid = rng.integers(0, 4, size=(5000, 3)).astype(np.float32)
    load("t_grid", grid, DB)
    compare("integer grid (ties)", "t_grid", 6, "l1")
    compare("integer grid (ties)", "t_grid", 6, "l2")
    skew = blobs(rng, 8000, 8, 1, 1.0)
    skew[:30] += 1000.0 * np.arange(1, 31, dtype=np.float32)[:, None]
    load("t_skew", skew, DB)
    compare("one cluster of thousands beside clusters of one row", "t_skew", 31, "l2")
    load_signatures("t_sig", rng, 4000, 4, 8, 8)
    compare("signatures", "t_sig", 8, "sqfd")
    compare("signatures", "t_sig", 8, "sqfd", ", alpha => 0.3")
    load_signatures("t_sig_big", rng, 10000, 5, 6, 12)
    compare("signatures", "t_sig_big", 12, "sqfd", ", max_iter => 10")

    compare_aggregate("t_mid", 10, "l1")
    compare_aggregate("t_sig", 8, "sqfd")
    for metric in ("l2", "l1", "cosine"):
        compare_silhouette("t_64", 20, metric)
    compare_silhouette("t_sig", 8, "sqfd")

    # a larger fit, timed (diagnostic only)
    load("t_time", blobs(rng, 100000, 32, 20, 2.0), DB)
    compare("blobs, timed", "t_time", 20, "l2", ", max_iter => 10")

    if SECOND == "gpu":
        load("small", blobs(rng, 1000, 8, 3), DB)
        load("big", rng.normal(size=(1000000, 64)).astype(np.float32), DB)
        timed_cancel("k-medoids during its rounds",
                     "SELECT kmedoids_fit('big', 'v', 2, init => 'random', seed => 1, max_iter => 1000, "
                     "engine => 'gpu')", 6000)
        backend_cancel()

    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
