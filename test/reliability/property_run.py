#!/usr/bin/python3
"""Randomised property run: thousands of random kmeans calls through SQL.

Each case draws random rows (n, d, NULL rows, duplicates, integer grids,
blobs, far offsets, values near the largest float and float subnormals), sometimes injects a fault (NaN or infinity, a zero vector
with metric cosine, k larger than the number of rows, a negative weight, no
rows at all, a bad option value), draws options (k, metric, init and explicit start centroids,
n_init, max_iter, tol, seed, weights) and calls one of the entry points:
the kmeans aggregate (real[] or float8[]), kmeans_fit, or the window function
kmeans_cluster next to the aggregate.  Every call must either fail cleanly
(an ERROR whose SQLSTATE the injected fault explains, never a lost
connection, never success on bad input) or return a model that satisfies,
recomputed here in float64 with numpy:

  shape        k centroids of dimension d, k sizes, k cluster inertias
  counts       sizes sum to n_rows = the rows with a vector (and a weight);
               n_skipped counts the others
  finite       no NaN or infinity anywhere in the model
  inertia      inertia = sum of squared distances to the nearest centroid
               (cosine: of 1 - cos), weighted, within 1e-6 relative (for
               cosine plus 4 (d + 2) 2^-52 per row: 1 - cos near 0 in double)
  cluster      each cluster_inertia likewise, and they sum to inertia
  nearest      every row's label (kmeans_labels, kmeans_assign or the window
               function) is its nearest centroid; sizes count the labels
  distance     kmeans_labels' distance is the recomputed one
  fields       metric, init, seed, n_init, max_iter, tol echo the call;
               1 <= iterations <= max_iter, and not converged only at max_iter
  window       the window function labels rows as kmeans_assign does with the
               aggregate's model for the same options
  repeat       the same call gives the same model (a sample of cases)
  fit = agg    kmeans_fit and the aggregate give the same model (a sample)
  labels       kmeans_labels agrees with kmeans_assign (a sample)

Prints TAP: one line per class with its count, the number of calls, and a
summary.  Fixed seed, time budget:

  property_run.py [--seconds 120] [--seed 1] [--case N]

(also KM_PROP_SECONDS, KM_PROP_SEED; --case N runs case N alone and prints it).
KM_PROP_ENGINE sets kmeans_gpu.engine.  Connects with the PG* environment
variables; creates and drops the database kmeans_prop.
"""
import argparse
import io
import math
import os
import sys
import time

import numpy as np
import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pgtest import connect, create_database  # noqa: E402

DB = "kmeans_prop"

CLASSES = [
    ("connection", "no call lost the connection"),
    ("sqlstate", "every error has a SQLSTATE its injected fault explains"),
    ("rejected", "every call with a bad input failed"),
    ("shape", "models have k centroids of dimension d, k sizes, k cluster inertias"),
    ("counts", "sizes sum to n_rows, the rows with a vector (and a weight); n_skipped the others"),
    ("finite", "no NaN or infinity in any model"),
    ("inertia", "inertia is the recomputed sum of squared distances (cosine: 1 - cos), within 1e-6"),
    ("cluster", "cluster_inertia is recomputed per cluster and sums to inertia"),
    ("nearest", "every label is the nearest centroid, recomputed in float64"),
    ("sizes", "sizes count the labels"),
    ("distance", "kmeans_labels distances are the recomputed ones"),
    ("fields", "the model's options echo the call; iterations within max_iter"),
    ("window", "the window function labels rows as kmeans_assign with the aggregate's model"),
    ("repeat", "the same call gives the same model"),
    ("fit_agg", "kmeans_fit and the aggregate give the same model"),
    ("labels", "kmeans_labels agrees with kmeans_assign"),
]

MODEL_FIELDS = ("k, dim, metric, centroids, sizes, inertia, iterations, converged, engine, "
                "n_rows, n_skipped, cluster_inertia, init, seed, n_init, max_iter, tol")


class Stats:
    def __init__(self):
        self.checked = {c: 0 for c, _ in CLASSES}
        self.failed = {c: [] for c, _ in CLASSES}
        self.calls = 0
        self.cases = 0
        self.models = 0
        self.clean_errors = 0
        self.faults = 0
        self.by_kind = {}

    def check(self, cls, ok, case, what):
        self.checked[cls] += 1
        if not ok:
            key = f"{case.style} {case.metric}"
            self.failed[cls].append((key, f"case {case.index}: {what} [{case.describe()}]"))
        return ok


class Case:
    """One random call: data, options, the entry point, and its faults."""

    def __init__(self, index, base_seed):
        self.index = index
        rng = np.random.default_rng([base_seed, index])
        self.rng = rng
        r = rng.random()
        self.n = int(rng.integers(1, 40)) if r < 0.3 else (
            int(rng.integers(40, 400)) if r < 0.8 else int(rng.integers(400, 3000)))
        r = rng.random()
        self.d = int(rng.integers(1, 9)) if r < 0.5 else (
            int(rng.integers(9, 41)) if r < 0.9 else int(rng.integers(41, 129)))
        self.style = rng.choice(["blobs", "uniform", "duplicates", "integers", "offset", "tiny",
                                 "huge", "subnormal"])
        self.X = self._data()
        self.metric = "cosine" if rng.random() < 0.3 else "l2"
        self.kind = rng.choice(["agg", "fit", "window"], p=[0.4, 0.4, 0.2])
        self.float8 = self.kind != "fit" and rng.random() < 0.2

        # NULL rows (and NULL weights for kmeans_fit)
        self.null_v = np.zeros(self.n, bool)
        if rng.random() < 0.4:
            self.null_v = rng.random(self.n) < rng.uniform(0, 0.3)
        self.w = None
        self.null_w = np.zeros(self.n, bool)
        if self.kind == "fit" and rng.random() < 0.35:
            self.w = rng.uniform(0.1, 10, self.n)
            if rng.random() < 0.3:
                self.w[rng.random(self.n) < 0.2] = 0.0
            if rng.random() < 0.2:
                self.w = np.round(self.w)
            if rng.random() < 0.1:
                # from float subnormals to near the largest float
                self.w = 10.0 ** rng.uniform(-44, 38.5, self.n)
            self.w = self.w.astype(np.float32).astype(np.float64)
            if rng.random() < 0.3:
                self.null_w = rng.random(self.n) < 0.15
        if rng.random() < 0.01:
            self.null_v[:] = True

        self.faults = set()
        inc = self.included()
        # injected faults, always on a row that is read
        if rng.random() < 0.05 and inc.any():
            row = int(rng.choice(np.flatnonzero(inc)))
            self.X[row, int(rng.integers(0, self.d))] = rng.choice([np.nan, np.inf, -np.inf])
            self.faults.add("nonfinite")
        if self.w is not None and rng.random() < 0.08 and inc.any():
            self.w[int(rng.choice(np.flatnonzero(inc)))] = -rng.uniform(0.1, 5)
            self.faults.add("negative weight")
        if self.metric == "cosine":
            if rng.random() < 0.04 and inc.any():
                self.X[int(rng.choice(np.flatnonzero(inc)))] = 0
            if ((self.X[inc] != 0).sum(axis=1) == 0).any():
                self.faults.add("zero vector")
        m = int(inc.sum())
        if m == 0:
            self.faults.add("no rows")
        if self.w is not None and m > 0 and "negative weight" not in self.faults \
                and not (self.w[inc] > 0).any():
            self.faults.add("zero weights")

        # options
        if rng.random() < 0.05:
            self.k = m + int(rng.integers(1, 4))
            self.faults.add("k > n")
        else:
            self.k = int(rng.integers(1, max(1, min(m, 16)) + 1))
        r = rng.random()
        self.init = "k-means++" if r < 0.5 else ("random" if r < 0.75 else "explicit")
        self.init_centroids = None
        if self.init == "explicit":
            finite = self.X[np.isfinite(self.X)].astype(np.float64)
            spread = float(np.std(finite)) if finite.size else 1.0
            C = np.clip(rng.normal(0, 1, (self.k, self.d)) * max(1.0, spread), -3e38, 3e38)
            if inc.any() and rng.random() < 0.7:
                C = self.X[rng.choice(np.flatnonzero(inc), self.k)] + rng.normal(0, 0.01, (self.k, self.d))
            C = np.nan_to_num(C, nan=1.0, posinf=1.0, neginf=-1.0).astype(np.float32)
            C[(C != 0).sum(axis=1) == 0, 0] = 1.0
            self.init_centroids = C
        self.n_init = 1 if self.init == "explicit" or rng.random() < 0.7 else int(rng.integers(2, 4))
        self.max_iter = 300 if rng.random() < 0.3 else int(rng.integers(1, 61))
        r = rng.random()
        self.tol = 0.0 if r < 0.3 else (1e-4 if r < 0.7 else float(rng.uniform(0, 0.1)))
        self.seed = int(rng.integers(-2**63, 2**63 - 1, dtype=np.int64))
        # a bad option value now and then
        if rng.random() < 0.04:
            bad = rng.choice(["max_iter", "tol", "n_init", "metric", "init", "centroids"])
            if bad == "max_iter":
                self.max_iter = int(rng.choice([0, -1, -2**31]))
            elif bad == "tol":
                self.tol = -float(rng.uniform(1e-6, 1))
            elif bad == "n_init":
                self.n_init = int(rng.choice([0, -5]))
            elif bad == "metric":
                self.metric = str(rng.choice(["l3", "manhattan", "", "cosine "]))
            elif bad == "init":
                self.init = str(rng.choice(["kmeans--", "farthest", ""]))
            elif self.init_centroids is not None:
                extra = np.ones((self.k, 1), np.float32)
                self.init_centroids = np.hstack([self.init_centroids, extra])
            else:
                bad = None
            if bad is not None:
                self.faults.add("bad option")
        # names are accepted in any case and in their common spellings: ask
        # with one now and then (the model must still report the canonical name)
        spellings = {"l2": ["L2", "Euclidean", "euclidean"], "cosine": ["Cosine", "COSINE"],
                     "k-means++": ["kmeans++", "K-Means++", "KMEANSPP"], "random": ["Random"],
                     "explicit": ["EXPLICIT"]}
        self.spelt = {}
        for key in ("metric", "init"):
            name = getattr(self, key)
            if name in spellings and rng.random() < 0.15:
                self.spelt[key] = str(rng.choice(spellings[name]))
        self.repeat = rng.random() < 0.08
        self.compare_fit = rng.random() < 0.1 and self.w is None and not self.float8
        self.compare_labels = rng.random() < 0.2

    def _data(self):
        rng, n, d = self.rng, self.n, self.d
        if self.style == "blobs":
            centers = rng.uniform(-10, 10, (int(rng.integers(1, 10)), d))
            X = centers[rng.integers(0, len(centers), n)] + rng.normal(0, rng.uniform(0.05, 2), (n, d))
        elif self.style == "uniform":
            X = rng.uniform(-1, 1, (n, d))
        elif self.style == "duplicates":
            distinct = rng.normal(0, 3, (int(rng.integers(1, 6)), d))
            X = distinct[rng.integers(0, len(distinct), n)]
        elif self.style == "integers":
            X = rng.integers(-2, 3, (n, d)).astype(float)
        elif self.style == "offset":
            X = rng.normal(0, 1, (n, d)) + rng.choice([1e3, -1e4, 5e4])
        elif self.style == "tiny":
            X = rng.normal(0, 1e-3, (n, d))
        elif self.style == "huge":
            # squares overflow float32: the float filter cannot decide alone
            X = rng.normal(0, 1, (n, d)) * 10.0 ** rng.uniform(15, 37.5)
            X = np.clip(X, -3e38, 3e38)
        else:
            # float32 subnormals
            X = rng.normal(0, 1, (n, d)) * 1e-39
        return X.astype(np.float32)

    def included(self):
        return ~self.null_v & ~self.null_w

    def options(self):
        o = {"metric": self.spelt.get("metric", self.metric), "init": self.spelt.get("init", self.init),
             "n_init": self.n_init,
             "max_iter": self.max_iter, "tol": self.tol, "seed": self.seed}
        if self.init_centroids is not None:
            o["init_centroids"] = [[float(x) for x in row] for row in self.init_centroids]
        return o

    def describe(self):
        return (f"{self.kind}{' float8' if self.float8 else ''} n={self.n} d={self.d} k={self.k} "
                f"{self.style} {self.metric} {self.init} n_init={self.n_init} "
                f"max_iter={self.max_iter} tol={self.tol:g} seed={self.seed} "
                f"nulls={int(self.null_v.sum())} weights={'yes' if self.w is not None else 'no'}"
                f"{' faults=' + ','.join(sorted(self.faults)) if self.faults else ''}")


# The SQLSTATE each fault may raise.
FAULT_STATES = {
    "nonfinite": {"22000"},
    "negative weight": {"22000"},
    "zero vector": {"22000"},
    "zero weights": {"22000"},
    "no rows": {"22000"},
    "k > n": {"22023"},
    "bad option": {"22023", "22000"},
}


def json_options(opts):
    import json
    return json.dumps(opts)


def load(cur, case):
    cur.execute("TRUNCATE prop")
    buf = io.StringIO()
    for i in range(case.n):
        v = "\\N" if case.null_v[i] else "{" + ",".join(fmt(x) for x in case.X[i].tolist()) + "}"
        if case.w is None:
            w = "1"
        else:
            w = "\\N" if case.null_w[i] else repr(float(case.w[i]))
        buf.write(f"{i}\t{v}\t{w}\n")
    buf.seek(0)
    cur.copy_expert("COPY prop (id, v, w) FROM STDIN", buf)


def fmt(x):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def centroid_literal(C):
    return "{" + ",".join("{" + ",".join(repr(float(x)) for x in row) + "}" for row in C) + "}"


def fetch_model(cur, sql, params):
    cur.execute(f"SELECT m, {', '.join('(m).' + f.strip() for f in MODEL_FIELDS.split(','))} "
                f"FROM ({sql}) q(m)", params)
    row = cur.fetchone()
    names = [f.strip() for f in MODEL_FIELDS.split(",")]
    model = dict(zip(names, row[1:]))
    model["text"] = row[0]
    return model


def vec_expr(case):
    return "v::float8[]" if case.float8 else "v"


def model_sql(case, kind=None):
    kind = kind or case.kind
    if kind == "fit":
        sql = ("SELECT kmeans_fit('prop', 'v', %s, max_iter => %s, tol => %s, init => %s, "
               "init_centroids => %s::real[], metric => %s, seed => %s, n_init => %s, "
               "weight_column => %s)")
        init = ("k-means++" if case.init == "explicit" and case.init_centroids is not None
                else case.spelt.get("init", case.init))
        params = (case.k, case.max_iter, case.tol, init,
                  None if case.init_centroids is None else centroid_literal(case.init_centroids),
                  case.spelt.get("metric", case.metric), case.seed, case.n_init,
                  None if case.w is None else "w")
        return sql, params
    return (f"SELECT kmeans({vec_expr(case)}, %s, %s::jsonb) FROM prop",
            (case.k, json_options(case.options())))


def reference(case, C):
    """The cost of every row against every centroid, in float64: the squared
    Euclidean distance for l2; for cosine 1 - cos between the row normalised
    to unit length and rounded to float32 (the rows cosine clusters, as the
    README says) and the centroid, never below 0."""
    X = case.X.astype(np.float64)
    C = C.astype(np.float64)
    if case.metric == "l2":
        return ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    # |x| summed in index order, as the engines do (km_exact_norm): a norm one
    # ulp off can round a coordinate of the unit row the other way
    xn = np.sqrt(np.cumsum(X * X, axis=1)[:, -1])
    with np.errstate(invalid="ignore", divide="ignore"):
        U = (X / xn[:, None]).astype(np.float32).astype(np.float64)
        D = 1.0 - (U @ C.T) / np.sqrt((C * C).sum(axis=1))[None, :]
    return np.maximum(D, 0.0)


def cosine_rounding(d):
    """How far two double evaluations of 1 - cos of d-value unit vectors may
    differ: a few roundings per term of the dot product, next to 1."""
    return 4.0 * (d + 2) * 2.0 ** -52


def check_model(cur, case, model, stats, labels_source):
    inc = case.included()
    m = int(inc.sum())
    k, d = case.k, case.d
    # real[] values arrive as their shortest decimal form: back to float32 first
    C = np.array(model["centroids"], dtype=np.float32).astype(np.float64) \
        if model["centroids"] is not None else None
    sizes = model["sizes"]
    ci = model["cluster_inertia"]
    ok_shape = (model["k"] == k and model["dim"] == d and C is not None and C.shape == (k, d)
                and sizes is not None and len(sizes) == k and ci is not None and len(ci) == k)
    stats.check("shape", ok_shape, case,
                f"k={model['k']} dim={model['dim']} centroids={None if C is None else C.shape}")
    if not ok_shape:
        return
    skipped = case.n - m
    stats.check("counts", sum(sizes) == m and model["n_rows"] == m and model["n_skipped"] == skipped,
                case, f"sum(sizes)={sum(sizes)} n_rows={model['n_rows']} n_skipped={model['n_skipped']}, "
                      f"expected {m} and {skipped}")
    finite = (np.isfinite(C).all() and math.isfinite(model["inertia"])
              and all(math.isfinite(x) for x in ci))
    stats.check("finite", finite, case, "NaN or infinity in the model")
    if not finite:
        return
    o = case.options()
    fields_ok = (model["metric"] == case.metric
                 and model["init"] == case.init
                 and model["seed"] == case.seed and model["n_init"] == case.n_init
                 and model["max_iter"] == case.max_iter and model["tol"] == case.tol
                 and 1 <= model["iterations"] <= case.max_iter
                 and (model["converged"] or model["iterations"] == case.max_iter)
                 and model["engine"] in ("cpu", "gpu"))
    stats.check("fields", fields_ok, case,
                f"metric={model['metric']} init={model['init']} seed={model['seed']} "
                f"n_init={model['n_init']} max_iter={model['max_iter']} tol={model['tol']} "
                f"iterations={model['iterations']} converged={model['converged']} engine={model['engine']}")

    # labels of every row with a vector, from the database
    labels = labels_source()
    D = reference(case, C)
    rows = np.flatnonzero(inc)
    w = np.ones(case.n) if case.w is None else case.w
    best = D.min(axis=1)
    lab = np.array([labels.get(int(i), -1) for i in rows], dtype=np.int64)
    if not stats.check("nearest", (lab >= 0).all() and (lab < k).all(), case,
                       f"labels out of range or missing: {sorted(set(lab.tolist()))[:10]}"):
        return
    got = D[rows, lab]
    slack = 1e-12 * (np.abs(case.X[rows].astype(np.float64)) ** 2).sum(axis=1) + 1e-300 \
        if case.metric == "l2" else np.full(len(rows), 1e-12)
    bad = np.flatnonzero(got > best[rows] + np.maximum(1e-12 * best[rows], slack))
    stats.check("nearest", len(bad) == 0, case,
                f"{len(bad)} rows not at their nearest centroid, e.g. row {rows[bad[0]] if len(bad) else ''}: "
                f"{got[bad[0]] if len(bad) else ''} > {best[rows][bad[0]] if len(bad) else ''}")
    counts = np.bincount(lab, minlength=k)
    stats.check("sizes", counts.tolist() == list(sizes), case,
                f"label counts {counts.tolist()} vs sizes {list(sizes)}")

    # inertia from the labels the database gave (the nearest, checked above),
    # within 1e-6 relative; for cosine each row's 1 - cos may also be off by
    # the double rounding of a d-term dot product next to 1 (both sides
    # compute it in double, in different orders)
    per = np.zeros(k)
    np.add.at(per, lab, w[rows] * got)
    total = per.sum()
    slack = np.zeros(k)
    if case.metric == "cosine":
        np.add.at(slack, lab, w[rows] * cosine_rounding(d))
    slack += 1e-300
    stats.check("inertia", abs(model["inertia"] - total) <= 1e-6 * abs(total) + slack.sum(), case,
                f"inertia {model['inertia']!r}, recomputed {total!r}")
    ok = (all(abs(ci[j] - per[j]) <= 1e-6 * abs(per[j]) + slack[j] for j in range(k))
          and abs(sum(ci) - model["inertia"]) <= 1e-9 * abs(model["inertia"]) + slack.sum())
    stats.check("cluster", ok, case, f"cluster_inertia {list(ci)} recomputed {per.tolist()}")
    return C


def run_case(conn, case, stats, verbose=False):
    cur = conn.cursor()
    load(cur, case)
    expected_states = set()
    for f in case.faults:
        expected_states |= FAULT_STATES[f]

    def call(fn):
        """Run fn; returns (result, sqlstate) and checks the error."""
        stats.calls += 1
        try:
            return fn(), None
        except psycopg2.Error as e:
            if e.pgcode is None or conn.closed:
                stats.check("connection", False, case, f"lost the connection: {e}")
                raise ConnectionLost() from e
            stats.check("sqlstate", e.pgcode in expected_states, case,
                        f"unexpected error {e.pgcode}: {e.pgerror.strip() if e.pgerror else e}")
            return None, e.pgcode

    stats.cases += 1
    stats.by_kind[case.kind] = stats.by_kind.get(case.kind, 0) + 1
    kind = "agg" if case.kind == "window" else case.kind
    sql, params = model_sql(case, kind)
    model, state = call(lambda: fetch_model(cur, sql, params))
    stats.check("connection", True, case, "")
    if verbose:
        print("# " + case.describe())
        print(f"# result: {'error ' + state if state else model}")
    if case.faults:
        stats.faults += 1
        stats.check("rejected", state is not None, case, "a bad input was accepted")
    if state is not None:
        if state in expected_states:
            stats.clean_errors += 1
        return
    stats.models += 1

    def assign_labels():
        cur.execute(f"SELECT id, kmeans_assign(%s::kmeans_model, {vec_expr(case)}) FROM prop "
                    "WHERE v IS NOT NULL", (model["text"],))
        return dict(cur.fetchall())

    def kmeans_labels():
        cur.execute("SELECT id, cluster_id, distance FROM kmeans_labels(%s::kmeans_model, 'prop', 'v', 'id')",
                    (model["text"],))
        rows = cur.fetchall()
        kmeans_labels.rows = rows
        return {r[0]: r[1] for r in rows if r[1] is not None}

    def window_labels():
        cur.execute(f"SELECT id, kmeans_cluster({vec_expr(case)}, %s, %s::jsonb) OVER () FROM prop",
                    (case.k, json_options(case.options())))
        return {r[0]: r[1] for r in cur.fetchall() if r[1] is not None}

    source = {"fit": kmeans_labels, "agg": assign_labels, "window": assign_labels}[case.kind]
    result, state = call(lambda: check_model(cur, case, model, stats, source))
    if state is not None:
        return
    C = result

    if case.kind == "fit" and C is not None:
        rows = [r for r in kmeans_labels.rows if r[1] is not None]
        D = reference(case, C)
        bad = 0
        for i, c, dist in rows:
            ref = D[i, c]
            ref = math.sqrt(max(ref, 0.0)) if case.metric == "l2" else ref
            slack = 1e-300 if case.metric == "l2" else cosine_rounding(case.d)
            if abs(dist - ref) > 1e-6 * abs(ref) + slack:
                bad += 1
        nulls = sum(1 for r in kmeans_labels.rows if r[1] is None)
        stats.check("distance", bad == 0 and len(kmeans_labels.rows) == case.n
                    and nulls == int(case.null_v.sum()), case,
                    f"{bad} distances differ; {len(kmeans_labels.rows)} rows, {nulls} NULL")
        if case.compare_labels:
            a, _ = call(assign_labels)
            if a is not None:
                lab = {r[0]: r[1] for r in rows}
                stats.check("labels", a == lab, case,
                            f"{sum(1 for i in a if a[i] != lab.get(i))} rows differ")

    if case.kind == "window":
        win, state = call(window_labels)
        if state is None:
            ass, _ = call(assign_labels)
            if ass is not None:
                stats.check("window", win == ass, case,
                            f"{sum(1 for i in ass if ass[i] != win.get(i))} rows differ")

    if case.repeat:
        again, state = call(lambda: fetch_model(cur, sql, params))
        if state is None:
            stats.check("repeat", again["text"] == model["text"], case,
                        f"{again['text']} != {model['text']}")
    if case.compare_fit:
        other = "agg" if kind == "fit" else "fit"
        osql, oparams = model_sql(case, other)
        om, state = call(lambda: fetch_model(cur, osql, oparams))
        if state is None:
            stats.check("fit_agg", om["text"] == model["text"], case,
                        f"{other}: {om['text']} != {model['text']}")


class ConnectionLost(Exception):
    pass


def session():
    """A connection to DB on the engine KM_PROP_ENGINE names, if any."""
    conn = connect(DB)
    engine = os.environ.get("KM_PROP_ENGINE")
    if engine:
        conn.cursor().execute("SET kmeans_gpu.engine = %s", (engine,))
    return conn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("KM_PROP_SECONDS", 120)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KM_PROP_SEED", 1)))
    ap.add_argument("--case", type=int, default=None)
    args = ap.parse_args()

    admin = create_database(DB)
    conn = connect(DB)
    conn.cursor().execute("CREATE EXTENSION kmeans_gpu")
    conn.cursor().execute("CREATE UNLOGGED TABLE prop (id bigint, v real[], w float8)")
    conn.close()
    conn = session()

    stats = Stats()
    start = time.monotonic()
    indices = [args.case] if args.case is not None else range(10**9)
    for i in indices:
        if args.case is None and time.monotonic() - start >= args.seconds:
            break
        case = Case(i, args.seed)
        try:
            run_case(conn, case, stats, verbose=args.case is not None)
        except ConnectionLost:
            try:
                conn.close()
            except Exception:
                pass
            # a crashed backend restarts the server: wait for it
            for _ in range(60):
                time.sleep(1)
                try:
                    conn = session()
                    break
                except psycopg2.OperationalError:
                    continue
    elapsed = time.monotonic() - start

    conn.close()
    admin.cursor().execute(f"DROP DATABASE {DB}")
    admin.close()

    n = 0
    failed = 0
    for cls, what in CLASSES:
        n += 1
        bad = stats.failed[cls]
        failed += bool(bad)
        count = stats.checked[cls]
        print(f"{'not ok' if bad else 'ok'} {n} - {what} ({count} checked"
              f"{', ' + str(len(bad)) + ' failed' if bad else ''})")
        # the first failure of each kind of data, so that one frequent
        # failure does not hide the others
        keys = {}
        for key, line in bad:
            keys.setdefault(key, []).append(line)
        if bad:
            print("# failures by data and metric: "
                  + ", ".join(f"{key} {len(lines)}" for key, lines in sorted(keys.items())))
        for key, lines in sorted(keys.items())[:8]:
            print("# " + lines[0])
    n += 1
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items()))
    ok = stats.calls >= (1 if args.case is not None else 1000)
    print(f"{'ok' if ok else 'not ok'} {n} - {stats.calls} calls made in {stats.cases} cases ({kinds})")
    print(f"1..{n}")
    print(f"# property run: seed {args.seed}, {elapsed:.0f} s, {stats.cases} cases, {stats.calls} calls, "
          f"{stats.models} models checked, {stats.faults} with injected faults, "
          f"{stats.clean_errors} clean errors, {failed} invariant classes failed")
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
