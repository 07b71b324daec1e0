#!/usr/bin/env python3
"""Split GPU fits through SQL: several devices, out of core, half precision.

- Out of core, forced by kmeans_gpu.gpu_memory_limit, equals the in-memory
  fit bit for bit, and so does the same device listed twice ('0,0', or every
  device twice on a machine with several); every one of them equals the CPU
  engine's fit (same explicit start): several shapes, both metrics, weights.
- storage float16 / bfloat16 on the GPU equals the CPU engine's fit of the
  rounded values (rounded here with numpy, to nearest even), and the CPU
  engine's fit with the same storage.
- A streamed fit cancelled in its iterations ends within a second and gives
  the memory of every device and the page-locked host memory back.
- 16 sessions fitting out of core at once: none fails, all equal the serial
  result.
Prints TAP.  Runs on the GPU machine after `source .devbundle/up`.
SPLIT_DEVICES: the device list to split over (default: every device twice,
'0,0' on a one-GPU machine).
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

DB = "kmeans_gpu_split"
tap = Tap(diag_lines=30)


def blobs(rng, n, d, k, spread=1.0):
    centers = rng.uniform(-10, 10, size=(k, d))
    return (centers[rng.integers(0, k, size=n)] + rng.normal(0, spread, size=(n, d))).astype(np.float32)


def literal(rows):
    return "{" + ",".join("{" + ",".join(repr(float(x)) for x in r) + "}" for r in rows) + "}"


def bfloat16(X):
    """float32 rounded to bfloat16, to nearest even, as float32."""
    b = X.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def fit_sql(table, k, init, metric, weighted, extra=""):
    return (f"kmeans_fit('{table}', 'v', {k}, max_iter => 25, tol => 0, metric => '{metric}', "
            f"init_centroids => '{literal(init)}'"
            + (", weight_column => 'w'" if weighted else "") + extra + ")")


def same(a, b):
    """SQL comparing two stored models field by field, bit for bit."""
    return (f"({a}).centroids = ({b}).centroids AND ({a}).sizes = ({b}).sizes AND "
            f"({a}).inertia = ({b}).inertia AND ({a}).cluster_inertia = ({b}).cluster_inertia AND "
            f"({a}).iterations = ({b}).iterations")


def ooc_limit(n, d, k, metric, weighted, devs):
    """The smallest memory limit (MB, in steps of 2) with which the device
    list plans the fit out of core and not in memory (kmeans_gpu_plan, on
    this machine's GPUs); None when there is no such limit."""
    for mb in range(34, 400, 2):
        row = psql(f"SET kmeans_gpu.gpu_memory_limit = '{mb}MB'; SET kmeans_gpu.devices = '{devs}'; "
                   f"SELECT bool_and(fits) FILTER (WHERE mode = 'out of core'), "
                   f"bool_or(fits) FILTER (WHERE mode = 'in memory') "
                   f"FROM kmeans_gpu_plan({n}, {d}, {k}, '{metric}', 'float32', {str(weighted).lower()})", DB)
        if row == "t|f":
            return mb
    return None


def verbose_of(settings, fit):
    """What kmeans_gpu.verbose says of a fit under settings (SQL)."""
    sql = settings + " SET kmeans_gpu.\"verbose\" = on; SELECT (" + fit + ").engine;"
    return subprocess.run(["psql", "-X", "-q", "-d", DB, "-f", "-"], input=sql.encode(),
                          capture_output=True).stderr.decode()


def layouts(rng, name, X, k, split, ooc_split, metric="l2", weights=None):
    """One shape: the CPU engine; the GPU in memory on device 0; the split
    list in memory; device 0 out of core; ooc_split out of core (the limits
    from kmeans_gpu_plan: out of core, not in memory)."""
    n, d = X.shape
    load("t", X, DB, weights)
    init = X[rng.choice(n, size=k, replace=False)]
    f = fit_sql("t", k, init, metric, weights is not None)
    shape = f"{name} (n={n}, d={d}, k={k}, {metric}{', weighted' if weights is not None else ''})"
    fits = [("split", split, 0)]
    for what, devs in (("out of core", "0"), ("split out of core", ooc_split)):
        limit = ooc_limit(n, d, k, metric, weights is not None, devs)
        tap.check(limit is not None, f"{shape}: some memory limit makes devices '{devs}' run it out of core")
        if limit is None:
            continue
        out = verbose_of(f"SET kmeans_gpu.engine = gpu; SET kmeans_gpu.devices = '{devs}'; "
                         f"SET kmeans_gpu.gpu_memory_limit = '{limit}MB';", f.replace("max_iter => 25", "max_iter => 1"))
        tap.check("out of core" in out, f"{shape}: with kmeans_gpu.gpu_memory_limit = {limit}MB, devices '{devs}' "
                  f"run it out of core (kmeans_gpu.verbose says so)", out)
        fits.append((what, devs, limit))
    script = f"""DROP TABLE IF EXISTS fits; CREATE TABLE fits (what text, m kmeans_model);
SET kmeans_gpu.engine = cpu;
INSERT INTO fits SELECT 'cpu', {f};
SET kmeans_gpu.engine = gpu;
SET kmeans_gpu.devices = '0';
INSERT INTO fits SELECT 'gpu', {f};
"""
    for what, devs, limit in fits:
        script += (f"SET kmeans_gpu.devices = '{devs}'; SET kmeans_gpu.gpu_memory_limit = '{limit}MB'; "
                   f"INSERT INTO fits SELECT '{what}', {f};\n")
    psql(script, DB)
    for what, devs, limit in fits:
        row = psql(f"SELECT (g.m).engine, {same('g.m', 'c.m')}, {same('g.m', 'o.m')} "
                   f"FROM fits g, fits c, fits o WHERE g.what = '{what}' AND c.what = 'cpu' "
                   f"AND o.what = 'gpu'", DB)
        engine, eq_cpu, eq_gpu = row.split("|")
        tap.check(engine == "gpu" and eq_gpu == "t",
                  f"{shape}: {what} (devices '{devs}') = the in-memory GPU fit, bit for bit", row)
        tap.check(eq_cpu == "t", f"{shape}: {what} = the CPU engine's fit, bit for bit", row)


def verbose_mode(split):
    """kmeans_gpu.verbose names the devices of a split fit."""
    out = verbose_of(f"SET kmeans_gpu.engine = gpu; SET kmeans_gpu.devices = '{split}';",
                     "kmeans_fit('t', 'v', 8, max_iter => 2)")
    tap.check(re.search(r"devices|device", out) is not None,
              f"kmeans_gpu.verbose names the devices of a split fit ('{split}')", out)


def storage(rng, ooc_split):
    """float16 and bfloat16 storage against the CPU engine on rounded rows."""
    X = blobs(rng, 60000, 48, 40, 2.0)
    init = X[rng.choice(len(X), size=40, replace=False)]
    limit = ooc_limit(60000, 48, 40, "l2", False, ooc_split) or 64
    for name, rounded in (("float16", X.astype(np.float16).astype(np.float32)), ("bfloat16", bfloat16(X))):
        load("raw", X, DB)
        load("rounded", rounded, DB)
        f_raw = fit_sql("raw", 40, init, "l2", False, f", storage => '{name}'")
        f_ref = fit_sql("rounded", 40, init, "l2", False)
        row = psql(f"""DROP TABLE IF EXISTS sf; CREATE TABLE sf (what text, m kmeans_model);
SET kmeans_gpu.engine = cpu;
INSERT INTO sf SELECT 'cpu rounded', {f_ref};
INSERT INTO sf SELECT 'cpu storage', {f_raw};
SET kmeans_gpu.engine = gpu;
INSERT INTO sf SELECT 'gpu storage', {f_raw};
SET kmeans_gpu.devices = '{ooc_split}';
SET kmeans_gpu.gpu_memory_limit = '{limit}MB';
INSERT INTO sf SELECT 'gpu split out of core', {f_raw};
SELECT (g.m).engine, (g.m).storage, {same('g.m', 'r.m')}, {same('g.m', 'c.m')}, {same('o.m', 'r.m')}
FROM sf g, sf r, sf c, sf o WHERE g.what = 'gpu storage' AND r.what = 'cpu rounded'
AND c.what = 'cpu storage' AND o.what = 'gpu split out of core'""", DB)
        engine, stored, eq_ref, eq_cpu, eq_ooc = row.split("|")
        tap.check(engine == "gpu" and stored == name, f"storage {name}: the GPU ran it and the model records it", row)
        tap.check(eq_ref == "t", f"storage {name}: GPU = the CPU engine's fit of the rounded rows, bit for bit", row)
        tap.check(eq_cpu == "t", f"storage {name}: GPU = the CPU engine with the same storage", row)
        tap.check(eq_ooc == "t", f"storage {name}: split out of core ('{ooc_split}') = the same, bit for bit", row)


def pinned_kb(pid):
    """Page-locked memory of a backend (VmPin, else VmLck), in kB; None if not shown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = f.read()
    except OSError:
        return None
    m = re.search(r"VmPin:\s+(\d+)", st) or re.search(r"VmLck:\s+(\d+)", st)
    return int(m.group(1)) if m else None


def cancel(split):
    """Cancel a streamed fit once it reports its second iteration."""
    load("huge", np.random.default_rng(3).normal(size=(2000000, 64)).astype(np.float32), DB)
    for devs in ("0", split):
        script = f"""SET application_name = 'kmeans_split_cancel';
SET kmeans_gpu.engine = gpu;
SET kmeans_gpu.devices = '{devs}';
SET kmeans_gpu.gpu_memory_limit = '96MB';
SET kmeans_gpu."verbose" = on;
SELECT 'before', sum(free_memory) FROM kmeans_gpu_devices();
SELECT kmeans_fit('huge', 'v', 512, init => 'random', seed => 1, max_iter => 100000, tol => 0);
SELECT 'usable', sum(free_memory) FROM kmeans_gpu_devices();
"""
        p = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-d", DB, "-f", "-"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        p.stdin.write(script.encode())
        p.stdin.close()
        seen = []
        for line in p.stdout:
            seen.append(line.decode())
            if "iteration 2:" in seen[-1]:
                break
        pid = psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'kmeans_split_cancel'", DB)
        during = pinned_kb(int(pid)) if pid else None
        t0 = time.time()
        psql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'kmeans_split_cancel'", DB)
        seen.append(p.stdout.read().decode())
        p.wait(timeout=120)
        late = time.time() - t0
        out = "".join(seen)
        after = pinned_kb(int(pid)) if pid else None
        free = dict(re.findall(r"^(before|usable)\|(\d+)$", out, re.M))
        tap.check("canceling statement due to user request" in out and late < 1.0,
                  f"cancel of a streamed fit (devices '{devs}') ends within a second ({late:.3f} s)", out)
        tap.check(len(free) == 2 and abs(int(free["before"]) - int(free["usable"])) < 16 << 20,
                  f"cancel of a streamed fit (devices '{devs}'): every device's free memory back, the session usable",
                  out)
        if not during:
            tap.check(True, f"cancel of a streamed fit (devices '{devs}'): page-locked memory # SKIP "
                      "not shown in /proc (VmPin/VmLck)")
        else:
            tap.check(after is not None and after < during,
                      f"cancel of a streamed fit (devices '{devs}'): page-locked host memory given back "
                      f"({during} kB during, {after} kB after)", out)


def sessions(split):
    """16 sessions fitting out of core at once."""
    X = blobs(np.random.default_rng(5), 400000, 64, 30, 2.0)
    load("conc", X, DB)
    f = "kmeans_fit('conc', 'v', 30, seed => 11, init => 'random', max_iter => 20, tol => 0)"
    setup = (f"SET kmeans_gpu.engine = gpu; SET kmeans_gpu.gpu_memory_limit = '48MB'; "
             f"SET kmeans_gpu.gpu_wait = '60s'; SET kmeans_gpu.devices = '{split}'; ")
    serial = psql(setup + f"SELECT md5(({f})::text)", DB)
    procs = [subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-d", DB, "-c", setup + f"SELECT md5(({f})::text)"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(16)]
    outs = [p.communicate(timeout=600)[0].decode().strip() for p in procs]
    fails = [o for o in outs if o != serial]
    tap.check(not fails, f"16 sessions fitting out of core at once: none failed, all equal the serial result",
              "\n".join(fails[:4]))


def main():
    try:
        ndev = subprocess.run(["nvidia-smi", "-L"], capture_output=True).stdout.decode().count("GPU ")
    except OSError:
        ndev = 1
    split = os.environ.get("SPLIT_DEVICES") or ",".join([str(i) for i in range(max(ndev, 1))] * 2)
    # out of core: every device once (or device 0 twice), so that the parts are large enough
    # for a limit to hold them out of core but not in memory
    ooc_split = ",".join(str(i) for i in range(ndev)) if ndev > 1 else "0,0"
    psql(f"DROP DATABASE IF EXISTS {DB}")
    psql(f"CREATE DATABASE {DB}")
    psql("CREATE EXTENSION kmeans_gpu", DB)
    rng = np.random.default_rng(11)

    layouts(rng, "blobs", blobs(rng, 200000, 64, 100, 2.0), 100, split, ooc_split)
    layouts(rng, "blobs", blobs(rng, 150000, 128, 1024, 3.0), 1024, split, ooc_split)
    layouts(rng, "narrow", blobs(rng, 400000, 8, 16, 2.0), 16, split, ooc_split)
    layouts(rng, "blobs", blobs(rng, 100000, 33, 50, 2.0), 50, split, ooc_split, metric="cosine")
    layouts(rng, "blobs", blobs(rng, 120000, 24, 30, 2.0), 30, split, ooc_split,
            weights=rng.integers(0, 4, size=120000).astype(np.float64))
    verbose_mode(split)
    storage(rng, ooc_split)
    cancel(split)
    sessions(split)

    psql(f"DROP DATABASE {DB}")
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
