#!/usr/bin/env python3
"""
bounds_model.py: how many rows a fit's bounds would send to the screen, on
the CPU, for bound schemes not (or not yet) in the engine.

Blobs as bench_engine makes them (2k centres in [-10, 10]^d, rows at a
centre plus N(0, 2^2), 10 % uniform rows), k-means++ seeds, Lloyd in float64
to tol 1e-4, and per iteration the share of rows each scheme would list,
with exact distances in place of the screen's rounded ones:
  H     Hamerly's bounds, as assign/bounds.cu keeps them (ub += own drift,
        lb -= the largest other drift; crossing rows measured first);
  Mm    the same, but lb falls only by the largest drift outside the m
        centroids that moved farthest, and a row that crosses only because
        of those is measured against them (listed if one is not farther
        than ub; else lb becomes the least of those distances and the rest's
        bound).  "pairs" is the far distances measured per row of n.
Prints one line an iteration.  kernels/bench/NOTES.md ("far centroids")
has what it gave and what the engine made of it.

    /usr/bin/python3 kernels/bench/bounds_model.py 200000 128 1024 32,128
"""
import sys

import numpy as np


def blobs(n, d, k, seed):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, (2 * k, d)).astype(np.float32)
    which = rng.integers(0, 2 * k, n)
    x = np.empty((n, d), np.float32)
    for i in range(0, n, 100000):
        m = min(100000, n - i)
        x[i:i + m] = centres[which[i:i + m]] + rng.normal(0, 2, (m, d)).astype(np.float32)
    noise = rng.uniform(size=n) < 0.1
    x[noise] = rng.uniform(-10, 10, (int(noise.sum()), d)).astype(np.float32)
    return x


def kmeanspp(x, xn, k, rng):
    first = x[rng.integers(len(x))]
    seeds = [first]
    md = np.maximum(xn - 2 * x @ first + first @ first, 0)
    for _ in range(1, k):
        p = md.astype(np.float64)
        c = x[rng.choice(len(x), p=p / p.sum())]
        seeds.append(c)
        md = np.minimum(md, np.maximum(xn - 2 * x @ c + c @ c, 0))
    return np.array(seeds, np.float64)


def main():
    n, d, k = (int(v) for v in sys.argv[1:4])
    ms = [int(v) for v in sys.argv[4].split(",")] if len(sys.argv) > 4 else [32]
    x = blobs(n, d, k, 4321)
    xn = (x.astype(np.float64) ** 2).sum(1).astype(np.float32)
    C = kmeanspp(x, xn, k, np.random.default_rng(7))
    schemes = [0] + ms
    U = {}
    L = {}
    prev = None
    last = None
    tolv = 1e-4 * np.mean(np.var(x.astype(np.float64), 0)) * d
    chunk = 50000
    for it in range(300):
        Cf = C.astype(np.float32)
        cn = (Cf * Cf).sum(1)
        lab = np.empty(n, np.int64)
        own = np.empty(n)
        sec = np.empty(n)
        if prev is not None:
            drift = np.sqrt(((C - prev) ** 2).sum(1))
            order = np.argsort(-drift)
            need = {m: np.zeros(n, bool) for m in schemes}
            pairs = {m: 0 for m in schemes}
        for i0 in range(0, n, chunk):
            xs = x[i0:i0 + chunk]
            r = np.arange(len(xs))
            D = np.sqrt(np.maximum(xn[i0:i0 + chunk, None] - 2 * xs @ Cf.T + cn[None, :], 0))
            a = np.argmin(D, 1)
            lab[i0:i0 + chunk] = a
            own[i0:i0 + chunk] = D[r, a]
            D2 = D.copy()
            D2[r, a] = np.inf
            sec[i0:i0 + chunk] = D2.min(1)
            if prev is None:
                continue
            p = last[i0:i0 + chunk]
            for m in schemes:
                u = U[m][i0:i0 + chunk] + drift[p]
                lo = L[m][i0:i0 + chunk]
                far, rest = order[:m], order[m:]
                l1 = lo - np.where(p == rest[0], drift[rest[1]], drift[rest[0]])
                u = np.where(u < l1, u, D[r, p])	# crossing rows measured
                if m:
                    bf = lo[:, None] - drift[far][None, :]
                    mine = p[:, None] == far[None, :]
                    meas = ~(u[:, None] < bf) & ~mine & (u < l1)[:, None]
                    df = np.where(mine, np.inf, np.where(meas, D[:, far], bf))
                    pairs[m] += int(meas.sum())
                    lf = df.min(1)
                else:
                    lf = np.inf
                nd = ~(u < l1) | ~(u < lf)
                need[m][i0:i0 + chunk] = nd
                U[m][i0:i0 + chunk] = np.where(nd, own[i0:i0 + chunk], u)
                L[m][i0:i0 + chunk] = np.where(nd, sec[i0:i0 + chunk], np.minimum(l1, lf))
        out = ["iter %d" % (it + 1)]
        if prev is None:
            for m in schemes:
                U[m] = own.copy()
                L[m] = sec.copy()
            out.append("all rows")
        else:
            for m in schemes:
                name = "M%d" % m if m else "H"
                out.append("%s %.1f%%" % (name, 100 * need[m].mean()))
                if m:
                    out.append("(pairs %.2f)" % (pairs[m] / n))
            out.append("moved %.1f%%" % (100 * (lab != last).mean()))
        print(*out, flush=True)
        counts = np.bincount(lab, minlength=k)
        o = np.argsort(lab, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nz = counts > 0
        new = C.copy()
        new[nz] = np.add.reduceat(x[o].astype(np.float64), starts[nz], axis=0) / counts[nz, None]
        shift = ((new - C) ** 2).sum()
        prev, C, last = C, new, lab
        if shift <= tolv:
            break


if __name__ == "__main__":
    main()
