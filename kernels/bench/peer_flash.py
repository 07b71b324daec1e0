#!/usr/bin/env python3
"""
peer_flash.py: our CUDA engine and the peer library flash-kmeans side by
side, on the same data, in the same process, on one GPU.

What it measures, per shape (A-F below):
  1. cuBLAS X @ C^T (n x k output, float32) with strict fp32 and with TF32
     allowed: the yardstick of one assignment's arithmetic.  Median of
     --gemm-reps, CUDA events.  The output is the full n x k matrix unless
     it would take more than half the free memory; then it is written in
     row chunks (and the line says so).
  2. Ours, time per Lloyd iteration: (T(13 iterations) - T(3)) / 10 of
     dataset_fit (explicit start centroids, tol 0, n_init 1, L2) on rows
     uploaded once (dataset_create/stage/commit), so neither the upload nor
     the set-up of a fit is counted.  tol 0 stops only when no row moved;
     the iterations each fit really ran (km_result.iterations) divide the
     difference.  Three times: KMG_SCREEN=fp32, tf32 and fp16 (the engine
     reads it at each fit; an engine that ignores it gives equal columns).
     Every iteration whole: KMG_BOUNDS=0, so no row is skipped by the
     bounds of later iterations (bench_engine bounds measures those).
     The tf32 and fp16 fits keep running sums (update/running.cu: after
     its first iteration a fit moves the exact cluster sums by the rows
     whose label changed); a fourth column, fp16 with KMG_RUNNING=0, sorts
     and sums every row every iteration, as flash-kmeans does.
     Median of --reps for each of T3 and T13, after one warm-up fit.
  3. Our labels for the start centroids, against the float64 argmin (ties
     to the lowest id) computed here on the GPU: the fit's own labels pass
     (dataset_fit with KMG_SEED_ONLY=1, which returns the seeds and their
     labels), and engine->assign.  The labels of the Lloyd iteration itself
     are not returned, so the centroids after one iteration are checked
     instead: they must be the means of the reference labels (to float32
     rounding); a wrong label moves its two centroids by far more.
  4. flash-kmeans 0.3.1 (Triton): batch_kmeans_Euclid(x[None], k,
     max_iters, tol=0.0, init_centroids=C0[None]) from the same start
     centroids, same (T13 - T3) / 10 (its tol test `shift < tol` never holds
     at 0, so it runs every iteration).  TF32: float32 rows, whose tl.dot
     Triton runs in TF32 (TRITON_F32_DEFAULT, set to tf32 here); fp16: a
     float16 copy of the rows and centroids (fp16 products, fp32 sums).
     Its wrong labels: the cluster ids that a 1-iteration call returns (the
     assignment to the start centroids) against the same float64 argmin of
     the float32 rows (so fp16's count includes the rounding of the rows;
     a row whose |x|^2 passes 65504 gets inf in fp16, and a note says so).
  5. One markdown table at the end (a row is also printed as each shape
     ends), and once per shape the lines of a fit traced by the
     engine (KMG_VERBOSE=1, KMG_SCREEN=fp16, KMG_BOUNDS=0, in a child
     process) that mention the screen: per iteration the rows moved,
     which is what the running sums cost in proportion to.  The fit runs
     the timing's longer count of iterations (13).

Shapes (n x d, k): A 100000 x 256, 1024; B 300000 x 408, 5000;
C 2000000 x 128, 1024; F 10000000 x 96, 256; D 1000000 x 8, 16;
E Fashion-MNIST 70000 x 784, 10 (pixels 0..255 as float32).
Blobs, as bench_engine.cu makes them: 2 k centres uniform in [-10, 10]^d;
90% of rows are a centre (uniform choice) plus N(0, 2^2) noise per value,
10% uniform in [-10, 10]^d.  numpy Generator(PCG64), blocks of 2^16 rows
from SeedSequence(seed).spawn, filled by threads (the same data for any
thread count).  Start centroids: k distinct rows drawn with the main
generator (Generator.choice, without replacement).

Run: build and fetch here, run there (no network there):
  make -C kernels/bench ARCH=90 bin/kmeans_gpu_cuda.so
  cp /usr/share/datasets/fashion-mnist/{train,t10k}-images-idx3-ubyte.gz kernels/bench/bin/
  grep -qx /.whl/ .git/info/exclude || echo /.whl/ >> .git/info/exclude
  python3 -m pip download --no-deps -d .whl flash-kmeans==0.3.1 tqdm
  on the GPU machine, carrying .whl and kernels/bench/bin (about 46 MB):
  kernels/bench/run_peer.sh --fmnist kernels/bench/bin [--shapes A,C] [--quick]
  (the wrapper installs the wheels offline into /tmp/site)
Without a GPU: python3 kernels/bench/peer_flash.py --selftest checks the
struct layouts, the data, the reference argmin (numpy against the
sequential sum) and the .so's table; a run without CUDA exits 2.
"""
import argparse
import concurrent.futures
import ctypes
import gc
import gzip
import os
import statistics
import struct
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name, n, d, k, data
SHAPES = [
    ("A", 100000, 256, 1024, "blobs"),
    ("B", 300000, 408, 5000, "blobs"),
    ("C", 2000000, 128, 1024, "blobs"),
    ("F", 10000000, 96, 256, "blobs"),
    ("D", 1000000, 8, 16, "blobs"),
    ("E", 70000, 784, 10, "fmnist"),
]
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz")


def log(*a):
    print(*a, flush=True)


# ---- The engine's C interface (kmeans_engine.h, kmeans_gpu_cuda.h) through ctypes ----

KM_GPU_ABI = 4
KM_ENGINE_ABI = 2
KM_OK, KM_ERR_DEVICE_FATAL = 0, 5
KM_INIT_EXPLICIT = 2
KM_METRIC_L2 = 0
STATUS = ["ok", "invalid", "nomem", "cancelled", "device", "device fatal", "device nomem",
          "unavailable"]

c_int, c_int32, c_int64, c_uint64 = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64
c_float, c_double, c_void_p, P = ctypes.c_float, ctypes.c_double, ctypes.c_void_p, ctypes.POINTER


class KmError(ctypes.Structure):
    _fields_ = [("status", c_int), ("message", ctypes.c_char * 256)]


class KmChunk(ctypes.Structure):
    _fields_ = [("x", P(c_float)), ("w", P(c_float)), ("n", c_int64)]


class KmData(ctypes.Structure):
    _fields_ = [("d", c_int), ("nchunks", c_int), ("chunks", P(KmChunk)), ("n", c_int64)]


class KmParams(ctypes.Structure):
    _fields_ = [("k", c_int), ("max_iter", c_int), ("tol", c_double), ("init", c_int),
                ("init_centroids", P(c_float)), ("metric", c_int), ("seed", c_uint64),
                ("n_init", c_int), ("chain_length", c_int)]


class KmHooks(ctypes.Structure):
    _fields_ = [("ctx", c_void_p), ("alloc", c_void_p), ("free", c_void_p), ("poll", c_void_p),
                ("report", c_void_p), ("n_threads", c_int)]


class KmResult(ctypes.Structure):
    _fields_ = [("centroids", P(c_float)), ("sizes", P(c_int64)),
                ("cluster_inertia", P(c_double)), ("labels", P(c_int32)), ("inertia", c_double),
                ("iterations", c_int), ("converged", c_int), ("best_run", c_int),
                ("relocated", c_int)]


FIT = ctypes.CFUNCTYPE(c_int, P(KmData), P(KmParams), P(KmHooks), P(KmResult), P(KmError))
ASSIGN = ctypes.CFUNCTYPE(c_int, P(KmData), P(c_float), c_int, c_int, P(c_int32), P(c_double),
                          P(KmHooks), P(KmError))


class KmEngine(ctypes.Structure):
    _fields_ = [("abi", c_int), ("name", ctypes.c_char_p), ("fit_workspace", c_void_p),
                ("fit", FIT), ("assign", ASSIGN), ("map", c_void_p), ("seed", c_void_p)]


class KmGpuDevice(ctypes.Structure):
    _fields_ = [("ordinal", c_int), ("name", ctypes.c_char * 128), ("total_bytes", c_uint64),
                ("free_bytes", c_uint64), ("cc_major", c_int), ("cc_minor", c_int),
                ("multiprocessors", c_int)]


class KmGpuApi(ctypes.Structure):
    _fields_ = [
        ("abi", c_int),
        ("device_count", ctypes.CFUNCTYPE(c_int, P(KmError))),
        ("device_info", ctypes.CFUNCTYPE(c_int, c_int, P(KmGpuDevice), P(KmError))),
        ("set_device", ctypes.CFUNCTYPE(c_int, c_int, P(KmError))),
        ("fit_device_bytes", ctypes.CFUNCTYPE(c_uint64, c_int64, c_int, c_int, c_int)),
        ("assign_device_bytes", ctypes.CFUNCTYPE(c_uint64, c_int64, c_int, c_int)),
        ("engine", P(KmEngine)),
        ("dataset_create", ctypes.CFUNCTYPE(c_void_p, c_int, c_int, c_int64, P(KmError))),
        ("dataset_stage", ctypes.CFUNCTYPE(c_void_p, c_void_p, P(c_int64), P(P(c_float)),
                                           P(KmError))),
        ("dataset_commit", ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, P(KmError))),
        ("dataset_rows", ctypes.CFUNCTYPE(c_int64, c_void_p)),
        ("dataset_fit", ctypes.CFUNCTYPE(c_int, c_void_p, P(KmParams), P(KmHooks), P(KmResult),
                                         P(KmError))),
        ("dataset_free", ctypes.CFUNCTYPE(None, c_void_p)),
        ("release_all", ctypes.CFUNCTYPE(None)),
    ] + [(name, c_void_p) for name in (
        "kmd_device_bytes", "kmd_host_bytes", "kmd_open", "kmd_steps_of", "kmd_close",
        "kmd_silhouette", "split_plan", "split_fit", "split_assign", "copy_rate",
        "dataset_drain_start", "dataset_drain_finish", "dataset_drain_stop")]


# Sizes and offsets as gcc x86-64 lays the headers out (a C program printing
# sizeof/offsetof, -I src/include -I kernels/include).  A header change that
# this file misses fails here, before any call.
C_LAYOUT = {
    (KmError, None): 260, (KmChunk, None): 24, (KmData, None): 24, (KmParams, None): 56,
    (KmHooks, None): 48, (KmResult, None): 56, (KmEngine, None): 56, (KmGpuApi, None): 216,
    (KmGpuDevice, None): 168,
    (KmParams, "tol"): 8, (KmParams, "init"): 16, (KmParams, "init_centroids"): 24,
    (KmParams, "metric"): 32, (KmParams, "seed"): 40, (KmParams, "n_init"): 48,
    (KmParams, "chain_length"): 52, (KmResult, "inertia"): 32, (KmResult, "iterations"): 40,
    (KmResult, "relocated"): 52, (KmEngine, "fit"): 24, (KmEngine, "assign"): 32,
    (KmEngine, "seed"): 48, (KmGpuApi, "engine"): 48, (KmGpuApi, "dataset_create"): 56,
    (KmGpuApi, "dataset_fit"): 88, (KmGpuApi, "release_all"): 104, (KmGpuApi, "copy_rate"): 184,
    (KmGpuApi, "dataset_drain_stop"): 208,
    (KmGpuDevice, "total_bytes"): 136, (KmGpuDevice, "multiprocessors"): 160,
    (KmData, "chunks"): 8, (KmData, "n"): 16, (KmHooks, "n_threads"): 40,
}


def check_layout():
    """Every struct size and key offset against the C compiler's."""
    for (cls, field), want in C_LAYOUT.items():
        got = ctypes.sizeof(cls) if field is None else getattr(cls, field).offset
        assert got == want, "ctypes layout of %s%s is %d, C says %d" % (
            cls.__name__, "" if field is None else "." + field, got, want)


class EngineError(RuntimeError):
    pass


def fptr(a, ctype=c_float):
    return a.ctypes.data_as(P(ctype))


class Engine:
    """kmeans_gpu_cuda.so through km_gpu_get_api(); every call checks its status."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        get = self.lib.km_gpu_get_api
        get.restype = P(KmGpuApi)
        p = get()
        if not p:
            raise EngineError("km_gpu_get_api returned NULL")
        self.api = p.contents
        if self.api.abi != KM_GPU_ABI:
            raise EngineError("KM_GPU_ABI %d, this script knows %d" % (self.api.abi, KM_GPU_ABI))
        self.eng = self.api.engine.contents
        if self.eng.abi != KM_ENGINE_ABI:
            raise EngineError("KM_ENGINE_ABI %d, this script knows %d"
                              % (self.eng.abi, KM_ENGINE_ABI))
        self.fatal = None       # set after KM_ERR_DEVICE_FATAL: the device is not used again

    def _check(self, st, err, what):
        if st != KM_OK:
            msg = "%s: %s (%s)" % (what, err.message.decode(errors="replace"),
                                   STATUS[st] if 0 <= st < len(STATUS) else st)
            if st == KM_ERR_DEVICE_FATAL:
                self.fatal = msg
            raise EngineError(msg)

    def _alive(self):
        if self.fatal:
            raise EngineError("device unusable since: " + self.fatal)

    def device(self):
        err = KmError()
        count = self.api.device_count(ctypes.byref(err))
        if count < 1:
            raise EngineError("no device: " + err.message.decode(errors="replace"))
        dev = KmGpuDevice()
        self._check(self.api.device_info(0, ctypes.byref(dev), ctypes.byref(err)), err,
                    "device_info")
        return count, dev

    def upload(self, x):
        """A dataset holding the rows of x, streamed through the staging buffers."""
        self._alive()
        n, d = x.shape
        err = KmError()
        ds = self.api.dataset_create(d, 0, n, ctypes.byref(err))
        if not ds:
            self._check(err.status or 1, err, "dataset_create")
        try:
            done = 0
            while done < n:
                room = c_int64(0)
                buf = self.api.dataset_stage(ds, ctypes.byref(room), None, ctypes.byref(err))
                if not buf or room.value < 1:
                    self._check(err.status or 1, err, "dataset_stage")
                m = min(room.value, n - done)
                ctypes.memmove(buf, x[done:done + m].ctypes.data, m * d * 4)
                self._check(self.api.dataset_commit(ds, m, ctypes.byref(err)), err,
                            "dataset_commit")
                done += m
            if self.api.dataset_rows(ds) != n:
                raise EngineError("dataset_rows %d != %d" % (self.api.dataset_rows(ds), n))
        except BaseException:
            self.api.dataset_free(ds)
            raise
        return ds

    def free(self, ds):
        if ds:
            self.api.dataset_free(ds)

    @staticmethod
    def _params(c0, max_iter):
        p = KmParams()
        p.k, p.max_iter, p.tol = c0.shape[0], max_iter, 0.0
        p.init, p.init_centroids = KM_INIT_EXPLICIT, fptr(c0)
        p.metric, p.seed, p.n_init, p.chain_length = KM_METRIC_L2, 1, 1, 1
        return p

    def fit(self, ds_or_x, c0, max_iter, labels=False):
        """
        One fit from c0 (on a dataset, or on host rows, uploaded by the call).
        Returns (seconds, iterations, centroids, labels or None, relocated).
        """
        self._alive()
        k, d = c0.shape
        host = isinstance(ds_or_x, np.ndarray)
        n = ds_or_x.shape[0] if host else self.api.dataset_rows(ds_or_x)
        p = self._params(c0, max_iter)
        cen = np.empty((k, d), np.float32)
        sizes = np.empty(k, np.int64)
        cin = np.empty(k, np.float64)
        lab = np.empty(n, np.int32) if labels else None
        r = KmResult()
        r.centroids, r.sizes, r.cluster_inertia = fptr(cen), fptr(sizes, c_int64), fptr(cin, c_double)
        r.labels = fptr(lab, c_int32) if labels else None
        err = KmError()
        if host:
            chunk = KmChunk(fptr(ds_or_x), None, n)
            data = KmData(d, 1, ctypes.pointer(chunk), n)
            t0 = time.perf_counter()
            st = self.eng.fit(ctypes.byref(data), ctypes.byref(p), None, ctypes.byref(r),
                              ctypes.byref(err))
        else:
            t0 = time.perf_counter()
            st = self.api.dataset_fit(ds_or_x, ctypes.byref(p), None, ctypes.byref(r),
                                      ctypes.byref(err))
        t = time.perf_counter() - t0
        self._check(st, err, "fit")
        return t, r.iterations, cen, lab, r.relocated

    def assign(self, x, c0):
        """engine->assign: labels of host rows x for centroids c0 (rows uploaded by the call)."""
        self._alive()
        n, d = x.shape
        lab = np.empty(n, np.int32)
        chunk = KmChunk(fptr(x), None, n)
        data = KmData(d, 1, ctypes.pointer(chunk), n)
        err = KmError()
        self._check(self.eng.assign(ctypes.byref(data), fptr(c0), c0.shape[0], KM_METRIC_L2,
                                    fptr(lab, c_int32), None, None, ctypes.byref(err)),
                    err, "assign")
        return lab


# ---- Data ----

BLOCK_ROWS = 1 << 16     # a block's temporaries stay small (d = 408: 107 MB)


def blobs(n, d, k, seed):
    """
    Blobs as bench_engine.cu's generate() (kind 0), from numpy's PCG64: 2k
    centres uniform in [-10, 10]^d; per row, with probability 0.9 a centre
    plus N(0, 2^2) noise, else uniform in [-10, 10]^d.  Row blocks have
    their own spawned streams, so threads fill them in any order.
    """
    root = np.random.SeedSequence(seed)
    rng = np.random.Generator(np.random.PCG64(root))
    nc = 2 * k
    centres = rng.uniform(-10.0, 10.0, size=(nc, d)).astype(np.float32)
    x = np.empty((n, d), np.float32)
    streams = root.spawn((n + BLOCK_ROWS - 1) // BLOCK_ROWS)

    def fill(b):
        g = np.random.Generator(np.random.PCG64(streams[b]))
        out = x[b * BLOCK_ROWS:(b + 1) * BLOCK_ROWS]
        m = out.shape[0]
        np.take(centres, g.integers(0, nc, m), axis=0, out=out)
        noise = g.standard_normal((m, d), dtype=np.float32)
        noise *= np.float32(2.0)
        out += noise
        uni = g.random(m) < 0.1
        out[uni] = g.uniform(-10.0, 10.0, size=(int(uni.sum()), d)).astype(np.float32)

    with concurrent.futures.ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as ex:
        list(ex.map(fill, range(len(streams))))
    return x, rng


def fmnist_dir(given):
    """The first folder holding both Fashion-MNIST image files (gz or not), or None."""
    where = [os.path.join(ROOT, "kernels/bench/bin"), "/usr/share/datasets/fashion-mnist"]
    for dirpath in ([given] if given else []) + where:
        if all(os.path.exists(os.path.join(dirpath, f)) or
               os.path.exists(os.path.join(dirpath, f[:-3])) for f in FMNIST_FILES):
            return dirpath
    return None


def fmnist(dirpath):
    """Train then test images, 70000 x 784, pixel bytes as float32 0..255."""
    parts = []
    for f in FMNIST_FILES:
        path = os.path.join(dirpath, f)
        opener = gzip.open if os.path.exists(path) else open
        with opener(path if os.path.exists(path) else path[:-3], "rb") as fh:
            buf = fh.read()
        magic, cnt, r, c = struct.unpack(">IIII", buf[:16])
        if magic != 2051 or len(buf) < 16 + cnt * r * c:
            raise ValueError("%s: not an idx3 image file" % f)
        parts.append(np.frombuffer(buf, np.uint8, cnt * r * c, 16).reshape(cnt, r * c))
    return np.concatenate(parts).astype(np.float32)


def shape_data(spec, args, seed):
    """Rows (n x d float32, C order) and start centroids (k distinct rows) of a shape."""
    name, n, d, k, kind = spec
    if args.quick:
        n //= 10
    if kind == "fmnist":
        where = fmnist_dir(args.fmnist)
        if where is None:
            raise FileNotFoundError("Fashion-MNIST files not found (--fmnist DIR)")
        x = np.ascontiguousarray(fmnist(where)[:n])
        rng = np.random.Generator(np.random.PCG64(seed))
    else:
        x, rng = blobs(n, d, k, seed)
    start = rng.choice(x.shape[0], size=k, replace=False)
    return x, np.ascontiguousarray(x[start])


# ---- The reference: float64 argmin, ties to the lowest id ----
#
# km_exact.h decides labels by the sum over coordinates, in index order, of
# (x - c)^2 in double, each operation rounded once.  Here the float64 GEMM
# expansion |x|^2 - 2 x.c + |c|^2 picks the nearest centroid; it is off from
# that sum by at most about (d + 4) * 2^-52 * (|x|^2 + |c|^2) per distance,
# so where the two best are farther apart than 8 times that (the slack) the
# pick is certain, and the few other rows ("close calls": ties and near ties)
# are settled by the sequential sum itself (separate multiply and add, no
# FMA), argmin taking the first of equal values.

def slack(d, xsq, csq_max):
    return 8.0 * (d + 4) * 2.0 ** -52 * (xsq + csq_max)


def exact_labels_np(x, c):
    s = np.zeros((x.shape[0], c.shape[0]), np.float64)
    for i in range(x.shape[1]):
        t = x[:, i:i + 1].astype(np.float64) - c[:, i][None, :].astype(np.float64)
        s = s + t * t
    return np.argmin(s, axis=1)


def ref_labels_np(x, c):
    """The reference labels in numpy (small cases, and to check the torch version)."""
    xd, cd = x.astype(np.float64), c.astype(np.float64)
    csq = (cd * cd).sum(1)
    xsq = (xd * xd).sum(1)
    dist = xsq[:, None] - 2.0 * (xd @ cd.T) + csq[None, :]
    lab = np.argmin(dist, axis=1)
    if c.shape[0] == 1:
        return lab, 0
    two = np.partition(dist, 1, axis=1)[:, :2]
    close = np.nonzero(two[:, 1] - two[:, 0] <= slack(x.shape[1], xsq, csq.max()))[0]
    if close.size:
        lab[close] = exact_labels_np(x[close], c)
    return lab, int(close.size)


def ref_labels_torch(torch, xg, cg):
    """The reference labels of GPU rows xg (float32) for centroids cg, on the GPU."""
    n, d = xg.shape
    k = cg.shape[0]
    cd = cg.double()
    csq = (cd * cd).sum(1)
    cmax = csq.max()
    lab = torch.empty(n, dtype=torch.int64, device=xg.device)
    step = max(1, min(n, (1 << 27) // k))   # a 1 GB float64 block of distances
    close = []
    for r0 in range(0, n, step):
        xd = xg[r0:r0 + step].double()
        xsq = (xd * xd).sum(1)
        dist = xsq[:, None] - 2.0 * (xd @ cd.T) + csq[None, :]
        if k == 1:
            lab[r0:r0 + step] = 0
            continue
        v, i = torch.topk(dist, 2, dim=1, largest=False, sorted=True)
        lab[r0:r0 + step] = i[:, 0]
        close.append(torch.nonzero(v[:, 1] - v[:, 0] <= slack(d, xsq, cmax)).squeeze(1) + r0)
        del xd, dist, v, i
    idx = torch.cat(close) if close else torch.empty(0, dtype=torch.int64, device=xg.device)
    sub = max(1, (1 << 24) // k)
    for s0 in range(0, idx.numel(), sub):
        rows = idx[s0:s0 + sub]
        xd = xg[rows].double()
        s = torch.zeros((rows.numel(), k), dtype=torch.float64, device=xg.device)
        for j in range(d):
            t = xd[:, j:j + 1] - cd[:, j][None, :]
            s = s + t * t
        lab[rows] = torch.argmin(s, dim=1)
    return lab, int(idx.numel())


def ref_step_torch(torch, xg, lab, k):
    """
    The centroids one Lloyd step moves to from the reference labels (float64
    sums, rounded to float32), the tolerance a correct engine stays within
    (2 float32 ulps, plus what float64 summation can be off), and the
    clusters' row counts.
    """
    n, d = xg.shape
    sums = torch.zeros((k, d), dtype=torch.float64, device=xg.device)
    step = max(1, (1 << 28) // d)           # a 2 GB float64 copy of the rows at a time
    for r0 in range(0, n, step):
        sums.index_add_(0, lab[r0:r0 + step], xg[r0:r0 + step].double())
    cnt = torch.bincount(lab, minlength=k)
    mean = (sums / cnt.clamp(min=1)[:, None].double()).float()
    maxabs = torch.linalg.vector_norm(xg, ord=float("inf")).double()
    tol = 2.0 * torch.abs(torch.nextafter(mean, torch.full_like(mean, float("inf"))) - mean).double() \
        + (cnt.double() * 2.0 ** -52 * maxabs)[:, None]
    return mean, tol, cnt


# ---- Timers ----

def median(v):
    return statistics.median(v)


def gemm_ms(torch, xg, cg, tf32, reps):
    """Median time of X @ C^T (float32 out) with TF32 allowed or not; chunked rows if needed."""
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    out = None
    try:
        n, k = xg.shape[0], cg.shape[0]
        free = torch.cuda.mem_get_info()[0]
        rows = min(n, max(1, (free // 2) // (4 * k)))
        out = torch.empty((rows, k), dtype=torch.float32, device=xg.device)
        ct = cg.t()

        def once():
            for r0 in range(0, n, rows):
                m = min(rows, n - r0)
                torch.matmul(xg[r0:r0 + m], ct, out=out[:m])

        once()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            once()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        return median(times), rows < n
    finally:
        torch.set_float32_matmul_precision("highest")
        out = None


def per_iter(run, iters, reps):
    """
    (median T(hi) - median T(lo)) / (iterations hi - lo) in ms, after one
    warm-up run; run(max_iter) returns (seconds, iterations run).
    """
    lo, hi = iters
    run(lo)
    t_lo, t_hi, i_lo, i_hi = [], [], lo, hi
    for _ in range(reps):
        t, i_lo = run(lo)
        t_lo.append(t)
        t, i_hi = run(hi)
        t_hi.append(t)
    if i_hi <= i_lo:
        raise RuntimeError("the fit stopped after %d iterations (asked %d)" % (i_hi, hi))
    return (median(t_hi) - median(t_lo)) / (i_hi - i_lo) * 1e3, i_lo, i_hi


# ---- One shape ----

def short(e):
    s = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return "error: " + (s if len(s) <= 70 else s[:67] + "...")


def fmt_ms(v):
    if isinstance(v, str):
        return v
    return "%.4f" % v if v < 1.0 else "%.3f" % v


def attempt(label, fn):
    """fn()'s value, or 'error: ...' (logged under label) when it raises."""
    try:
        return fn()
    except Exception as e:
        log("%s: %s" % (label, traceback.format_exc().strip().splitlines()[-1]))
        return short(e)


class Row(dict):
    """A table row: each column's value, or 'error: ...' when that column failed."""

    def cell(self, key, fn):
        self[key] = attempt("%s: %s" % (self["shape"], key), fn)
        return self[key]


SCREENS = ("fp32", "tf32", "fp16")

# (column, KMG_SCREEN, KMG_RUNNING): the fp16 screen again with every row summed every iteration
OURS = [("ours_" + s, s, None) for s in SCREENS] + [("ours_fp16_all", "fp16", "0")]

COLUMNS = [("shape", "shape"), ("n", "n"), ("d", "d"), ("k", "k"),
           ("gemm32", "cuBLAS fp32 ms"), ("gemm_tf32", "TF32 GEMM ms"),
           ("ours_fp32", "ours fp32 screen ms"), ("ours_tf32", "ours tf32 screen ms"),
           ("ours_fp16", "ours fp16 screen ms"), ("ours_fp16_all", "ours fp16, all rows summed ms"),
           ("flash_tf32", "flash TF32 ms"), ("flash_fp16", "flash fp16 ms"),
           ("ratio", "ours(fp16)/min(flash)"), ("ratio_all", "ours(fp16, all rows summed)/min(flash)"),
           ("ours_wrong", "ours wrong labels (fp32/tf32/fp16)"),
           ("flash_wrong", "flash wrong labels (TF32/fp16)")]


def table_line(row):
    vals = []
    for key, _ in COLUMNS:
        v = row.get(key, "-")
        if key in ("gemm32", "gemm_tf32", "ours_fp32", "ours_tf32", "ours_fp16", "ours_fp16_all",
                   "flash_tf32", "flash_fp16"):
            v = fmt_ms(v)
        elif key in ("ratio", "ratio_all") and not isinstance(v, str):
            v = "%.3f" % v
        vals.append(str(v))
    return "| " + " | ".join(vals) + " |"


def table_head():
    return "| " + " | ".join(h for _, h in COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def run_ours(torch, eng, x, c0, xg, ref, step_ref, row, args):
    """
    Our columns (OURS: KMG_SCREEN fp32, tf32, fp16, and fp16 with every
    row summed) on one upload, and for each screen the wrong labels (None
    ref: not checked).
    """
    name = row["shape"]
    t0 = time.perf_counter()
    ds = eng.upload(x)
    up = time.perf_counter() - t0
    log("%s: ours: rows uploaded once in %.2f s (%.1f GB/s through the staging buffers)" % (
        name, up, x.nbytes / up / 1e9))
    wrong = {}
    os.environ["KMG_BOUNDS"] = "0"      # whole iterations: the peer skips no row either
    try:
        for column, screen, running in OURS:
            os.environ["KMG_SCREEN"] = screen
            if running is None:
                os.environ.pop("KMG_RUNNING", None)
            else:
                os.environ["KMG_RUNNING"] = running

            def timing():
                ms, i_lo, i_hi = per_iter(lambda m: eng.fit(ds, c0, m)[:2], args.iters, args.reps)
                log("%s: ours %s screen%s: %s ms per iteration (iterations %d-%d)" % (
                    name, screen, ", every row summed" if running == "0" else "", fmt_ms(ms),
                    i_lo, i_hi))
                return ms

            def labels():
                if ref is None:
                    raise RuntimeError("no reference labels")
                ref_h = ref.cpu().numpy()
                os.environ["KMG_SEED_ONLY"] = "1"     # the seeds and their labels, no iteration
                try:
                    _, iters, _, lab_fit, _ = eng.fit(ds, c0, 1, labels=True)
                finally:
                    del os.environ["KMG_SEED_ONLY"]
                if iters != 0:
                    raise RuntimeError("KMG_SEED_ONLY=1 ignored (%d iterations ran)" % iters)
                w_fit = int(np.count_nonzero(lab_fit != ref_h))
                w_asg = int(np.count_nonzero(eng.assign(x, c0) != ref_h))
                # the Lloyd iteration's own labels, through the centroids they move to
                mean, tol, cnt = step_ref
                _, _, cen, _, reloc = eng.fit(ds, c0, 1)
                if reloc or int((cnt == 0).sum()):
                    off = "n/a"
                else:
                    bad = (torch.from_numpy(cen).to(xg.device) - mean).abs().double() > tol
                    off = int(bad.any(dim=1).sum())
                log("%s: ours %s screen: wrong labels for the start centroids: fit's labels pass "
                    "%d, assign %d; centroids after one iteration off the reference means: %s%s" % (
                        name, screen, w_fit, w_asg, off,
                        " (empty clusters re-seeded)" if off == "n/a" else ""))
                if w_fit == w_asg == 0 and off in (0, "n/a"):
                    return 0
                return "fit %d, assign %d, centroids %s" % (w_fit, w_asg, off)

            row.cell(column, timing)
            if running is None:
                wrong[screen] = attempt("%s: ours %s labels" % (name, screen), labels)
    finally:
        os.environ.pop("KMG_SCREEN", None)
        os.environ.pop("KMG_BOUNDS", None)
        os.environ.pop("KMG_RUNNING", None)
        eng.free(ds)
    row["ours_wrong"] = " / ".join(str(wrong[s]) for s in SCREENS)


def run_flash(torch, fk, xg, cg, ref, row, args):
    """flash-kmeans with float32 rows (TF32 dot) and with a float16 copy."""
    name = row["shape"]
    k = cg.shape[0]
    wrong = {}
    for dt, key in ((torch.float32, "flash_tf32"), (torch.float16, "flash_fp16")):
        x3 = xg[None] if dt == torch.float32 else xg.to(dt)[None]
        c3 = cg[None].to(dt).contiguous()

        def call(m):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ids, _, it = fk(x3, k, max_iters=m, tol=0.0, init_centroids=c3)
            torch.cuda.synchronize()
            return time.perf_counter() - t0, it, ids

        def timing():
            ms, i_lo, i_hi = per_iter(lambda m: call(m)[:2], args.iters, args.reps)
            log("%s: %s: %s ms per iteration (iterations %d-%d)"
                % (name, key, fmt_ms(ms), i_lo, i_hi))
            return ms

        def labels():
            if ref is None:
                raise RuntimeError("no reference labels")
            ids = call(1)[2][0].long()      # iteration 1 assigns to the start centroids
            w = int((ids != ref).sum())
            log("%s: %s: wrong labels for the start centroids (its iteration 1): %d" % (
                name, key, w))
            return w

        row.cell(key, timing)
        wrong[key] = attempt("%s: %s labels" % (name, key), labels)
        if dt == torch.float16:
            # flash keeps |x|^2 in the input's type: past 65504 it is inf in fp16
            top = float(torch.linalg.vector_norm(xg, dim=1).max()) ** 2
            if top > 65504.0:
                log("%s: note: max |x|^2 = %.4g overflows float16 (flash's fp16 |x|^2)"
                    % (name, top))
        x3 = c3 = None
    row["flash_wrong"] = "%s / %s" % (wrong["flash_tf32"], wrong["flash_fp16"])


def verbose_child(spec, args, seed):
    """A fit of the timing's longer count traced by the engine in a child; its lines about the screen."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child-verbose", spec[0], "--so", args.so,
           "--seed", str(seed), "--iters", ",".join(str(v) for v in args.iters)] + \
        (["--quick"] if args.quick else []) + \
        (["--fmnist", args.fmnist] if args.fmnist else [])
    env = dict(os.environ, KMG_VERBOSE="1", KMG_SCREEN="fp16", KMG_BOUNDS="0")
    env.pop("KMG_SEED_ONLY", None)
    env.pop("KMG_RUNNING", None)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    for line in p.stderr.splitlines():
        if "screen" in line.lower():
            log("%s: %s" % (spec[0], line))
    if p.returncode != 0:
        log("%s: verbose child rc=%d: %s" % (spec[0], p.returncode,
                                             (p.stderr.strip().splitlines() or [""])[-1]))


def run_shape(torch, eng, fk, spec, args, seed):
    """Every column of one shape; a failing column says so in its cell."""
    name, n, d, k, kind = spec
    t0 = time.perf_counter()
    try:
        x, c0 = shape_data(spec, args, seed)
    except FileNotFoundError as e:
        log("\n== %s: skipped: %s" % (name, e))
        return None
    row = Row(shape=name, n=x.shape[0], d=d, k=k)
    log("\n== %s: %d x %d, k %d, %s, made in %.1f s" % (
        name, x.shape[0], d, k, "Fashion-MNIST" if kind == "fmnist" else
        "blobs (%d centres, seed %d)" % (2 * k, seed), time.perf_counter() - t0))
    xg = torch.from_numpy(x).cuda()
    cg = torch.from_numpy(c0).cuda()
    ref = step_ref = None
    try:
        def gemm(tf32):
            ms, chunked = gemm_ms(torch, xg, cg, tf32, args.gemm_reps)
            log("%s: cuBLAS X @ C^T %s: %s ms%s" % (name, "TF32" if tf32 else "fp32", fmt_ms(ms),
                                                    " (in row chunks)" if chunked else ""))
            return ms

        row.cell("gemm32", lambda: gemm(False))
        row.cell("gemm_tf32", lambda: gemm(True))
        try:
            t0 = time.perf_counter()
            ref, nclose = ref_labels_torch(torch, xg, cg)
            step_ref = ref_step_torch(torch, xg, ref, k)
            log("%s: reference labels in %.2f s (float64; %d close calls settled by the "
                "sequential sum)" % (name, time.perf_counter() - t0, nclose))
        except Exception as e:
            log("%s: reference labels: %s" % (name, short(e)))
            ref = step_ref = None
        torch.cuda.empty_cache()
        if eng is None:
            row["ours_fp32"] = row["ours_tf32"] = row["ours_fp16"] = row["ours_fp16_all"] = \
                row["ours_wrong"] = \
                "error: no engine"
        else:
            try:
                run_ours(torch, eng, x, c0, xg, ref, step_ref, row, args)
            except Exception as e:
                log("%s: ours: %s" % (name, short(e)))
                for key in ("ours_fp32", "ours_tf32", "ours_fp16", "ours_fp16_all", "ours_wrong"):
                    row.setdefault(key, short(e))
        if fk is None:
            row["flash_tf32"] = row["flash_fp16"] = row["flash_wrong"] = "error: not importable"
        else:
            try:
                run_flash(torch, fk, xg, cg, ref, row, args)
            except Exception as e:
                log("%s: flash: %s" % (name, short(e)))
                for key in ("flash_tf32", "flash_fp16", "flash_wrong"):
                    row.setdefault(key, short(e))
        flash = [v for v in (row.get("flash_tf32"), row.get("flash_fp16"))
                 if isinstance(v, float) and v > 0]
        for key, col in (("ratio", "ours_fp16"), ("ratio_all", "ours_fp16_all")):
            ours = row.get(col)
            row[key] = ours / min(flash) if isinstance(ours, float) and flash else "-"
    finally:
        xg = cg = ref = step_ref = None     # the closures above hold none of them
        gc.collect()
        torch.cuda.empty_cache()
    if eng is not None and not args.no_trace:
        try:
            verbose_child(spec, args, seed)
        except Exception as e:
            log("%s: verbose child: %s" % (name, short(e)))
    log(table_head())
    log(table_line(row))
    return row


# ---- Entry points ----

def child_verbose(args):
    """Hidden --child-verbose: one fit of the timing's longer count; the engine traces it on stderr."""
    spec = next(s for s in SHAPES if s[0] == args.child_verbose)
    x, c0 = shape_data(spec, args, args.seed)
    eng = Engine(args.so)
    t, iters = eng.fit(x, c0, args.iters[1])[:2]
    print("child: %d-iteration fit (%d run) in %.3f s" % (args.iters[1], iters, t), file=sys.stderr)
    return 0


def selftest(args):
    """What runs without a GPU: layouts, data, the reference argmin, the .so's table."""
    ok = 0
    x = blobs(3000, 5, 7, 11)[0]
    x2 = blobs(3000, 5, 7, 11)[0]
    assert x.dtype == np.float32 and x.shape == (3000, 5) and np.array_equal(x, x2)
    x = blobs(3 * BLOCK_ROWS + 5, 4, 3, 12)[0]         # several blocks, filled by threads
    assert np.array_equal(x, blobs(3 * BLOCK_ROWS + 5, 4, 3, 12)[0])
    assert np.isfinite(x).all() and np.abs(x).max() < 30.0
    ok += 1
    spec = ("T", 30000, 6, 9, "blobs")
    ns = argparse.Namespace(quick=True, fmnist=None)
    x, c0 = shape_data(spec, ns, 5)
    assert x.shape == (3000, 6) and c0.shape == (9, 6)
    assert len({tuple(r) for r in c0}) == 9
    ok += 1
    rng = np.random.default_rng(3)
    settled = 0
    for trial in range(20):
        n, d, k = 500, int(rng.integers(1, 40)), int(rng.integers(1, 30))
        if trial % 2:
            xs = rng.integers(0, 4, size=(n, d)).astype(np.float32)  # ties galore
            cs = xs[rng.choice(n, size=k, replace=False)]
        else:
            xs = rng.standard_normal((n, d), dtype=np.float32) * np.float32(10.0 ** int(rng.integers(-3, 4)))
            cs = xs[rng.choice(n, size=k, replace=False)].copy()
            if k > 2:
                cs[k - 1] = cs[0]                                  # duplicate centroid: lowest id
        got, nclose = ref_labels_np(xs, cs)
        want = exact_labels_np(xs, cs)
        assert np.array_equal(got, want), "reference argmin differs from the sequential sum"
        settled += nclose
    assert settled > 0, "no close call was exercised"
    ok += 1
    where = fmnist_dir(args.fmnist)
    if where:
        f = fmnist(where)
        assert f.shape == (70000, 784) and f.max() == 255.0 and f.dtype == np.float32
        ok += 1
        log("selftest: Fashion-MNIST from %s: %s" % (where, f.shape))
    else:
        log("selftest: Fashion-MNIST not found; reader not checked")
    eng = Engine(args.so)
    log("selftest: %s: KM_GPU_ABI %d, engine '%s' ABI %d" % (
        args.so, eng.api.abi, eng.eng.name.decode(), eng.eng.abi))
    ok += 1
    try:
        count, dev = eng.device()
        log("selftest: engine sees %d device(s), 0: %s" % (count, dev.name.decode()))
    except EngineError as e:
        log("selftest: engine: %s" % e)
    try:
        import torch
        if torch.cuda.is_available():
            xs = rng.integers(0, 3, size=(4000, 9)).astype(np.float32)
            cs = xs[rng.choice(4000, size=50, replace=False)]
            lt, _ = ref_labels_torch(torch, torch.from_numpy(xs).cuda(), torch.from_numpy(cs).cuda())
            assert np.array_equal(lt.cpu().numpy(), ref_labels_np(xs, cs)[0])
            ok += 1
            log("selftest: torch reference argmin equals numpy's")
    except ImportError:
        pass
    log("%d passed, 0 failed" % ok)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES),
                    help="comma-separated shape names (default all: A,B,C,F,D,E)")
    ap.add_argument("--quick", action="store_true", help="n / 10 rows per shape (a dry run)")
    ap.add_argument("--so", default=os.environ.get("KMG_CUDA_SO") or
                    os.path.join(ROOT, "kernels/bench/bin/kmeans_gpu_cuda.so"),
                    help="the engine (default $KMG_CUDA_SO, else kernels/bench/bin/kmeans_gpu_cuda.so)")
    ap.add_argument("--fmnist", default=None, help="folder with the Fashion-MNIST idx gz files")
    ap.add_argument("--seed", type=int, default=1234, help="data seed (shape i gets seed + i)")
    ap.add_argument("--reps", type=int, default=5, help="fits per iteration count (median)")
    ap.add_argument("--gemm-reps", type=int, default=7, help="GEMM timings (median)")
    ap.add_argument("--iters", default="3,13", help="the two iteration counts")
    ap.add_argument("--no-trace", action="store_true", help="no KMG_VERBOSE child per shape")
    ap.add_argument("--selftest", action="store_true", help="the checks that need no GPU")
    ap.add_argument("--child-verbose", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.iters = tuple(int(v) for v in args.iters.split(","))
    check_layout()
    if args.child_verbose:
        return child_verbose(args)
    if args.selftest:
        return selftest(args)

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        log("needs a CUDA device (and PyTorch with CUDA)")
        return 2
    # flash's float32 tl.dot runs in TF32 by Triton's default; say so explicitly
    os.environ["TRITON_F32_DEFAULT"] = "tf32"
    log("device: %s" % torch.cuda.get_device_name(0))
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "none"
    fk, fv = None, "not importable"
    try:
        import flash_kmeans
        # the Triton implementation itself: the package's __init__ would fall back to torch
        from flash_kmeans.kmeans_triton_impl import batch_kmeans_Euclid as fk
        fv = "%s (%s)" % (flash_kmeans.__version__, os.path.dirname(flash_kmeans.__file__))
    except Exception as e:
        fv = "not importable: %s" % e
    log("torch %s, CUDA %s, triton %s, flash-kmeans %s" % (torch.__version__, torch.version.cuda,
                                                           tv, fv))
    torch.zeros(1, device="cuda")       # torch's context first; the engine shares it
    eng = None
    try:
        eng = Engine(args.so)
        count, dev = eng.device()
        log("engine: %s, device 0 %s (cc %d.%d, %d SMs)"
            % (args.so, dev.name.decode(), dev.cc_major, dev.cc_minor, dev.multiprocessors))
    except Exception as e:
        log("engine: %s: %s" % (args.so, e))
        eng = None
    log("method: per iteration = (median T(%d) - median T(%d)) / iterations between, %d reps; "
        "ours on rows uploaded once; wrong labels against the float64 argmin for the start "
        "centroids" % (args.iters[1], args.iters[0], args.reps))

    want = [s.strip() for s in args.shapes.split(",") if s.strip()]
    rows = []
    for i, spec in enumerate(SHAPES):
        if spec[0] not in want:
            continue
        try:
            row = run_shape(torch, eng, fk, spec, args, args.seed + i)
        except Exception as e:
            log("%s: %s" % (spec[0], traceback.format_exc()))
            row = Row(shape=spec[0], n=spec[1], d=spec[2], k=spec[3], ours_fp32=short(e))
        if row is not None:
            rows.append(row)
    log("\n## peer_flash on %s%s\n" % (torch.cuda.get_device_name(0), " (--quick)" if args.quick
                                       else ""))
    log(table_head())
    for row in rows:
        log(table_line(row))
    if eng is not None:
        eng.api.release_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
