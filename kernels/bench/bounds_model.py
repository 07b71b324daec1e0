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
        bound).  m@eta: the same with the screen's slack, a screened or
        far-tested row's ub^2 raised and lb^2 lowered by eta |x| cmax / 2
        (the engine's float16 screen: eta about 0.006 at B's scale).
        m! and m~ (also after @eta): the engine's test before round 18, a
        row whose own centroid is far listed rather than tested, and a
        crossing row measured only where ub minus its drift is under the
        bound over every other centroid (!) or under the bound it is
        judged by (~); plain m is the engine's test since.
        "pairs" is the far distances measured per row of n,
        "tested" the rows that needed some (the engine screens such a row
        against the whole far tile of m centroids).
  Pm    the far set kept per row (Pm or Pm:w, window w, default 4): a
        row's lower bounds are two, LA for the far set S_s of the iteration
        s when it was last screened and LB for the other centroids, each
        falling by the largest drift in its own set; a row whose ub
        crosses LA alone is tested against S_s again (the far tiles of the
        last w iterations kept), and stays if ub is under that exact
        bound; else, or where ub crosses LB, it is listed, and after its
        screen its set is the current far set.  A row's set older than w
        iterations is merged into LB.
  Yg    Yinyang's bounds with groups of g centroids (the seeds clustered
        into k / g groups of g each, fixed for the fit): a lower bound per
        row and group, falling by the group's largest drift; a row whose ub
        is under all of them stays, else (after measuring ub) it is listed
        and screened against the groups whose bound is under ub.  "groups"
        is the share of a listed row's groups screened; "blocks" the work
        of a screen that walks, for each block of 128 listed rows, every
        group some row of it needs, as a share of a whole screen's, with
        the rows listed in their own order and (after "sorted") in the
        order of their first iteration's labels (rows laid out by cluster
        once).
Options: --gpu runs it on CuPy (Hamerly's and Mm's bounds only; every
distance in float64) for the benchmark's full sizes; --data=PREFIX fits
bench_engine's own rows and seeds (PREFIX.x, PREFIX.seeds, written by
`BOUNDS_DUMP=dir bench_engine bounds`) instead of blobs and k-means++;
--moved-tol stops as the engine does (at most 1e-4 of the rows moved)
instead of at a centroid shift of 1e-4 of the data's variance.
Prints one line an iteration, and each scheme's totals over the fit; stops
with a message if a row that Mm or Pm kept changed cluster (a bound that
was not one).  kernels/bench/NOTES.md ("far centroids", "Yinyang groups on
the screen", "The far set kept per row") has what it gave and what the
engine made of it.

    /usr/bin/python3 kernels/bench/bounds_model.py 200000 128 1024 32,128
    /usr/bin/python3 kernels/bench/bounds_model.py 200000 96 256 Y16,Y32,Y64
    /usr/bin/python3 kernels/bench/bounds_model.py 60000 408 1000 26,P26,P26:8
    /usr/bin/python3 kernels/bench/bounds_model.py 60000 408 1000 26,26@0.0054
    python3 kernels/bench/bounds_model.py --gpu --data=/tmp/dump/B --moved-tol \
        300000 408 5000 128,128@0.0059,128@0.0059!,128@0.0059~
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


def draw(p, rng, xp):
    """A row with probability p / p.sum(), as numpy's Generator.choice draws it (one uniform)."""
    if xp is np:
        return rng.choice(len(p), p=p / p.sum())
    cdf = xp.cumsum(p / p.sum())
    cdf /= cdf[-1]
    u = xp.asarray([rng.random()])
    return min(int(xp.searchsorted(cdf, u, side="right")[0]), len(p) - 1)


def kmeanspp(x, xn, k, rng, xp):
    first = x[rng.integers(len(x))]
    seeds = [first]
    md = xp.maximum(xn - 2 * x @ first + first @ first, 0)
    for _ in range(1, k):
        c = x[draw(md.astype(xp.float64), rng, xp)]
        seeds.append(c)
        md = xp.minimum(md, xp.maximum(xn - 2 * x @ c + c @ c, 0))
    return xp.stack(seeds).astype(xp.float64)


def balanced_groups(C, g, rng):
    """Group id of each centroid: k / g groups of g, near centres of a few Lloyd steps."""
    k = len(C)
    G = k // g
    cen = C[rng.choice(k, G, replace=False)]
    for _ in range(10):
        a = ((C[:, None, :] - cen[None, :, :]) ** 2).sum(2).argmin(1)
        for j in range(G):
            if (a == j).any():
                cen[j] = C[a == j].mean(0)
    dist = ((C[:, None, :] - cen[None, :, :]) ** 2).sum(2)
    grp = np.full(k, -1)
    room = np.full(G, g)
    for flat in np.argsort(dist, axis=None):
        c, j = divmod(int(flat), G)
        if grp[c] < 0 and room[j] > 0:
            grp[c] = j
            room[j] -= 1
    return grp


def block_work(need, order, rows=128):
    """Rows x groups walked by blocks of `rows` listed rows (need: rows x groups; order: the list)."""
    m = need[order]
    total = 0
    for b in range(0, len(m), rows):
        blk = m[b:b + rows]
        total += len(blk) * int(blk.any(0).sum())
    return total


def far_spec(v):
    """m, m@eta, m!, m~ (and after @eta): the far centroids' count and the screen's slack eta."""
    f = v.rstrip("!~").split("@")
    return int(f[0]), float(f[1]) if len(f) > 1 else 0.0


def main():
    args = [v for v in sys.argv[1:] if not v.startswith("--")]
    moved_tol = "--moved-tol" in sys.argv
    xp = np
    if "--gpu" in sys.argv:
        import cupy as xp
        import cupyx
    n, d, k = (int(v) for v in args[:3])
    spec = args[3].split(",") if len(args) > 3 else ["32"]
    # Mm (or m@eta): the far centroids' count, and the screen's slack eta |x| cmax on squared distances
    ms = [v for v in spec if v[0].isdigit()]
    mdef = {v: far_spec(v) for v in ms}
    mdef["H"] = (0, 0.0)
    gs = [int(v[1:]) for v in spec if v.startswith("Y")]
    ps = [tuple(int(t) for t in (v[1:].split(":") + ["4"])[:2]) for v in spec if v.startswith("P")]
    if any(k % g for g in gs):
        sys.exit("Yg: k must be a multiple of g")
    if xp is not np and (gs or ps):
        sys.exit("--gpu: Hamerly's and Mm's bounds only")
    data = [v[7:] for v in sys.argv if v.startswith("--data=")]
    if data:
        # bench_engine's rows and seeds (BOUNDS_DUMP): the engine's own fit, bound by bound
        raw = {e: np.fromfile(data[0] + "." + e, np.float32) for e in ("x", "seeds")}
        if raw["x"].size != n * d or raw["seeds"].size != k * d:
            sys.exit("--data: %s.x and .seeds do not hold %d x %d rows and %d seeds" % (data[0], n, d, k))
        x = xp.asarray(raw["x"].reshape(n, d))
    else:
        x = xp.asarray(blobs(n, d, k, 4321))
    # on the GPU every distance in float64 (the CPU's float32 products serve at its small sizes)
    xn = (x.astype(xp.float64) ** 2).sum(1).astype(xp.float32 if xp is np else xp.float64)
    if data:
        C = xp.asarray(raw["seeds"].reshape(k, d).astype(np.float64))
    else:
        C = kmeanspp(x, xn, k, np.random.default_rng(7), xp)
    schemes = ["H"] + ms
    U = {}
    L = {}
    grng = np.random.default_rng(11)
    groups = {g: balanced_groups(C, g, grng) for g in gs}
    cols = {g: np.argsort(groups[g], kind="stable") for g in gs}	# centroids group by group
    YU = {}
    YL = {}
    PS = {pw: {} for pw in ps}	# per scheme: U, LA, LB, tF (-1: none), far sets by iteration
    fit = {key: [0.0, 0.0] for key in schemes}	# rows listed, rows tested, over the fit (of n)
    fitp = {pw: [0.0, 0.0] for pw in ps}
    sorted_rows = None
    work = {g: [0, 0, 0, 0] for g in gs}	# listed rows, groups screened, block groups (own order, sorted)
    prev = None
    last = None
    tolv = 1e-4 * xp.mean(xp.var(x.astype(xp.float64), 0)) * d
    chunk = 50000 if xp is np else 200000
    for it in range(300):
        Cf = C.astype(xp.float32 if xp is np else xp.float64)
        cn = (Cf * Cf).sum(1)
        lab = xp.empty(n, xp.int64)
        own = xp.empty(n)
        sec = xp.empty(n)
        if prev is not None:
            drift = xp.sqrt(((C - prev) ** 2).sum(1))
            order = xp.argsort(-drift)
            need = {m: xp.zeros(n, bool) for m in schemes}
            pairs = {m: 0 for m in schemes}
            gneed = {g: np.zeros((n, k // g), bool) for g in gs}
            tested = {m: 0 for m in schemes}
            pneed = {pw: np.zeros(n, bool) for pw in ps}
            ptest = {pw: 0 for pw in ps}
            ptop = {}
            for pw in ps:
                st = PS[pw]
                pm, pwin = pw
                st["sets"][it] = order[:pm].copy()
                for s_ in [s_ for s_ in st["sets"] if s_ <= it - pwin]:
                    del st["sets"][s_]
                # sets older than the window merged into LB (the rows' own sets of it - w)
                old = (st["tF"] >= 0) & (st["tF"] <= it - pwin)
                st["LB"][old] = np.minimum(st["LB"][old], st["LA"][old])
                st["LA"][old] = np.inf
                st["tF"][old] = -1
                # top two drifts in each kept set and in its complement (own excluded per row below)
                top = {}
                for s_, S in st["sets"].items():
                    if s_ == it:
                        continue
                    inS = np.zeros(k, bool)
                    inS[S] = True
                    dA = np.where(inS, drift, -1.0)
                    dB = np.where(inS, -1.0, drift)
                    iA = np.argsort(-dA)[:2]
                    iB = np.argsort(-dB)[:2]
                    top[s_] = (iA[0], dA[iA[0]], dA[iA[1]], iB[0], dB[iB[0]], dB[iB[1]], inS)
                ptop[pw] = top
            gdrift = {g: np.array([drift[groups[g] == j].max() for j in range(k // g)]) for g in gs}
        for i0 in range(0, n, chunk):
            xs = x[i0:i0 + chunk]
            r = xp.arange(len(xs))
            D = xp.sqrt(xp.maximum(xn[i0:i0 + chunk, None] - 2 * xs @ Cf.T + cn[None, :], 0))
            a = xp.argmin(D, 1)
            lab[i0:i0 + chunk] = a
            own[i0:i0 + chunk] = D[r, a]
            D2 = D.copy()
            D2[r, a] = xp.inf
            sec[i0:i0 + chunk] = D2.min(1)
            for g in gs:
                # each group's least distance other than the row's centroid: exact after a screen
                gmin = D2[:, cols[g]].reshape(len(xs), k // g, g).min(2)
                if prev is None:
                    YL[g] = YL.get(g, np.empty((n, k // g)))
                    YL[g][i0:i0 + chunk] = gmin
                    continue
                p = last[i0:i0 + chunk]
                u = YU[g][i0:i0 + chunk] + drift[p]
                lg = YL[g][i0:i0 + chunk] - gdrift[g][None, :]
                cross = ~(u < lg.min(1))
                u = np.where(cross, D[r, p], u)	# crossing rows measured
                ng = lg < u[:, None]
                listed = ng.any(1)
                gneed[g][i0:i0 + chunk] = ng & listed[:, None]
                # listed: exact bounds of the screened groups; the old centroid joins its group's bound
                keep = np.where(ng, gmin, lg)
                moved = a != p
                keep[r[moved], groups[g][p[moved]]] = np.minimum(keep[r[moved], groups[g][p[moved]]],
                                                                 D[r[moved], p[moved]])
                YL[g][i0:i0 + chunk] = np.where(listed[:, None], keep, lg)
                YU[g][i0:i0 + chunk] = np.where(listed, own[i0:i0 + chunk], u)
            if prev is None:
                continue
            p = last[i0:i0 + chunk]
            xs_norm = xp.sqrt(xn[i0:i0 + chunk].astype(xp.float64))
            for key in schemes:
                m, eta = mdef[key]
                # what a screen leaves of a squared distance on each side (half the slack)
                half = 0.5 * eta * xs_norm * xp.sqrt(cn.max())
                u0 = U[key][i0:i0 + chunk]
                u = u0 + drift[p]
                lo = L[key][i0:i0 + chunk]
                far, rest = order[:m], order[m:]
                l1 = lo - xp.where(p == rest[0], drift[rest[1]], drift[rest[0]])
                rule = key[-1] if key[-1] in "!~" else ""
                if rule:
                    # the engine's test: lg against every other centroid, the far test only for a
                    # row whose centroid is not far, a crossing row measured only where ub - its
                    # drift is under lg ("!") or under the bound it is judged by ("~")
                    lg = lo - xp.where(p == order[0], drift[order[1]], drift[order[0]])
                    ownfar = drift[p] > drift[rest[0]] if m else xp.zeros(len(p), bool)
                    le = lg if rule == "!" else xp.where(ownfar, lg, l1)
                    u = xp.where(~(u < lg) & (u0 - drift[p] < le), D[r, p], u)
                else:
                    u = xp.where(u < l1, u, D[r, p])	# crossing rows measured
                if m:
                    bf = lo[:, None] - drift[far][None, :]
                    mine = p[:, None] == far[None, :]
                    meas = ~(u[:, None] < bf) & ~mine & (u < l1)[:, None]
                    dfar = xp.sqrt(xp.maximum(D[:, far] ** 2 - half[:, None], 0))	# screened
                    df = xp.where(mine, xp.inf, xp.where(meas, dfar, bf))
                    pairs[key] += int(meas.sum())
                    lf = df.min(1)
                else:
                    lf = xp.inf
                nd = ~(u < l1) | ~(u < lf)
                if rule:
                    nd = xp.where(ownfar, ~(u < lg), nd)
                    lf = xp.where(ownfar, xp.inf, lf)
                    l1 = xp.where(ownfar, lg, l1)
                if (a[~nd] != p[~nd]).any():
                    sys.exit("%s: a row kept by its bounds changed cluster" % key)
                if m:
                    tested[key] += int((meas.any(1) & (u < l1)).sum())
                need[key][i0:i0 + chunk] = nd
                so = xp.sqrt(own[i0:i0 + chunk] ** 2 + half)
                ss = xp.sqrt(xp.maximum(sec[i0:i0 + chunk] ** 2 - half, 0))
                U[key][i0:i0 + chunk] = xp.where(nd, so, u)
                L[key][i0:i0 + chunk] = xp.where(nd, ss, xp.minimum(l1, lf))
            for pw in ps:
                st = PS[pw]
                sl = slice(i0, i0 + chunk)
                tF = st["tF"][sl]
                u = st["U"][sl] + drift[p]
                # each row's two bounds fall by the largest drift in its own sets, its centroid aside
                mxA = np.zeros(len(xs))
                mxB = np.where(p == order[0], drift[order[1]], drift[order[0]])
                inA = np.zeros((len(xs), k), bool)
                for s_, (a0, a1, a2, b0, b1, b2, inS) in ptop[pw].items():
                    w_ = tF == s_
                    mxA[w_] = np.where(p[w_] == a0, a2, a1)
                    mxB[w_] = np.where(p[w_] == b0, b2, b1)
                    inA[w_] = inS
                la = st["LA"][sl] - mxA
                lb = st["LB"][sl] - mxB
                u = np.where(u < np.minimum(la, lb), u, D[r, p])	# crossing rows measured
                stay = u < np.minimum(la, lb)
                ft = ~stay & (u < lb) & (tF >= 0)
                # the test: the exact least distance over the row's own far set, its centroid aside
                dA = np.where(inA & (np.arange(k)[None, :] != p[:, None]), D, np.inf).min(1)
                passed = ft & (u < dA)
                ptest[pw] += int(ft.sum())
                scr = ~stay & ~passed
                if (a[~scr] != p[~scr]).any():
                    sys.exit("P%d:%d: a row kept by its bounds changed cluster" % pw)
                pneed[pw][sl] = scr
                # screened rows: exact bounds against the current far set and the rest
                inT = np.zeros(k, bool)
                inT[order[:pw[0]]] = True
                Dn = D.copy()
                Dn[r, a] = np.inf
                nA = np.where(inT[None, :], Dn, np.inf).min(1)
                nB = np.where(inT[None, :], np.inf, Dn).min(1)
                st["U"][sl] = np.where(scr, own[sl], u)
                st["LA"][sl] = np.where(scr, nA, np.where(passed, dA, la))
                st["LB"][sl] = np.where(scr, nB, lb)
                st["tF"][sl] = np.where(scr, it, tF)
        out = ["iter %d" % (it + 1)]
        if prev is None:
            for key in schemes:
                half = 0.5 * mdef[key][1] * xp.sqrt(xn.astype(xp.float64)) * xp.sqrt(cn.max())
                U[key] = xp.sqrt(own ** 2 + half)
                L[key] = xp.sqrt(xp.maximum(sec ** 2 - half, 0))
            for g in gs:
                YU[g] = own.copy()
            for pw in ps:
                PS[pw].update(U=own.copy(), LA=np.full(n, np.inf), LB=sec.copy(),
                              tF=np.full(n, -1), sets={})
            sorted_rows = np.argsort(lab, kind="stable") if gs else None
            out.append("all rows")
        else:
            for key in schemes:
                m = mdef[key][0]
                out.append("%s %.1f%%" % ("M" + key if key != "H" else key, 100 * need[key].mean()))
                if m:
                    out.append("(pairs %.2f, tested %.1f%%)" % (pairs[key] / n, 100 * tested[key] / n))
                fit[key][0] += float(need[key].mean())
                fit[key][1] += tested[key] / n
            for pw in ps:
                out.append("P%d:%d %.1f%% (tested %.1f%%)" % (pw[0], pw[1], 100 * pneed[pw].mean(),
                                                            100 * ptest[pw] / n))
                fitp[pw][0] += pneed[pw].mean()
                fitp[pw][1] += ptest[pw] / n
            for g in gs:
                nm = gneed[g]
                li = np.flatnonzero(nm.any(1))
                lis = sorted_rows[nm[sorted_rows].any(1)]
                G = k // g
                bw = (block_work(nm, li) / G / n, block_work(nm, lis) / G / n)
                w = work[g]
                w[0] += len(li) / n
                w[1] += nm.sum() / G / n
                w[2] += bw[0]
                w[3] += bw[1]
                out.append("Y%d %.1f%% (groups %.2f, blocks %.1f%%, sorted %.1f%%)" %
                           (g, 100 * len(li) / n, nm.sum() / max(len(li), 1) / G, 100 * bw[0], 100 * bw[1]))
            out.append("moved %.1f%%" % (100 * (lab != last).mean()))
        print(*out, flush=True)
        counts = xp.bincount(lab, minlength=k)
        nz = counts > 0
        new = C.copy()
        if xp is np:
            o = np.argsort(lab, kind="stable")
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            new[nz] = np.add.reduceat(x[o].astype(np.float64), starts[nz], axis=0) / counts[nz, None]
        else:
            sums = xp.zeros((k, d))	# float64 atomics: the sums' last bits vary from run to run
            for i0 in range(0, n, chunk):
                cupyx.scatter_add(sums, lab[i0:i0 + chunk], x[i0:i0 + chunk].astype(xp.float64))
            new[nz] = sums[nz] / counts[nz, None]
        shift = ((new - C) ** 2).sum()
        stop = shift <= tolv
        if moved_tol:
            # the engine's rule (finalize_block.cuh): at most tol of the rows moved
            stop = last is not None and float((lab != last).mean()) <= 1e-4
        prev, C, last = C, new, lab
        if stop:
            break
    for key in schemes:
        m = mdef[key][0]
        print("%s over the fit, in whole screens: rows listed %.2f, rows tested %.2f (%.3f of "
              "whole screens at %d of %d centroids)" % ("M" + key if key != "H" else key, fit[key][0],
                                                        fit[key][1], fit[key][1] * m / k, m, k))
    for pw in ps:
        print("P%d:%d over the fit, in whole screens: rows listed %.2f, rows tested %.2f (%.3f of "
              "whole screens)" % (pw[0], pw[1], fitp[pw][0], fitp[pw][1], fitp[pw][1] * pw[0] / k))
    for g in gs:
        w = work[g]
        print("Y%d over the fit, in whole screens: rows listed %.2f, groups screened %.2f, "
              "blocks %.2f, sorted %.2f" % (g, w[0], w[1], w[2], w[3]))


if __name__ == "__main__":
    main()
