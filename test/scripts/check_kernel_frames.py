#!/usr/bin/python3
"""The engine's kernels keep their arguments where the launch put them.  A
kernel that takes kmg_args by value and hands a reference to it to an
out-of-line function gets a private copy of all of it (584 bytes now, 544
then) on every thread's stack unless the parameter is __grid_constant__: on 1M x 8 rows that copy
was 36 MB of local stores a pass, more than the rows themselves, and a
third of the iteration (kernels/bench/NOTES.md, "The narrow pass, round
12"); kmg_finalize1_kernel and kmg_reduce_finalize_kernel still hand the
reference to kmg_finalize_block out of line (the narrow pass now runs the
end inline).  The library's build keeps ptxas's report on every kernel for
every architecture it compiles (kmeans_gpu_cuda.so.ptxas, the Makefile);
this reads it (make brings it up to date first) and fails any kernel taking
kmg_args by value whose stack frame could hold such a copy (two kernels
whose frames hold arrays of their own have limits of their own: ALLOWED).
Prints TAP,
one line per such kernel with its frame for each architecture; without
nvcc (the CUDA engine is optional) one skipped line.

    check_kernel_frames.py [--limit BYTES] [--report FILE]
        --limit: default 128 (the other frames today are 0 to 40 bytes)
        --report: read FILE instead of the build's (no make)
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REPORT = "kmeans_gpu_cuda.so.ptxas"

# kmg_args by value: its mangled name not after a pointer (P), reference (R)
# or const (K, which mangles only what a pointer or reference points to).
BY_VALUE = re.compile(r"(?<![KPR])8kmg_args")

# Kernels whose frames hold arrays of their own, not a copy of the arguments
# (their SASS zeroes the frame with STL.128 and stores no parameter in it):
# the frame each may have, past which it fails like any other.
ALLOWED = {
    # km_xlevels_round's superaccumulator (km_xacc) for sums of more than
    # two levels: 880 bytes (2026-11)
    "kmg_run_clus_kernel": 1024,
    # kmg_xsums_piece's per-level sums (wl, s) and staged values, indexed
    # at run time: 96 bytes on sm_80, 128 on sm_90a (2026-11)
    "kmg_xsums_kernel": 256,
}


def nvcc_found():
    return shutil.which("nvcc") is not None or os.access("/usr/local/cuda/bin/nvcc", os.X_OK)


def build_report():
    """Bring the library and its report up to date; an error text, or None."""
    run = subprocess.run(["make", "-s", "--no-print-directory", REPORT], cwd=ROOT,
                         capture_output=True, text=True)
    if run.returncode != 0:
        return run.stdout + run.stderr
    return None


def frames(text):
    """{(mangled entry function, architecture): stack frame bytes} from ptxas -v's report."""
    out = {}
    arch = {}
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '([^']+)'", line)
        if m:
            arch[m.group(1)] = m.group(2)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and current in arch:
            out[(current, arch[current])] = int(m.group(1))
            current = None
    return out


def readable(mangled):
    """_Z17kmg_narrow_kernelILi8ELi16ELi4EEv8kmg_argsiii -> kmg_narrow_kernel<8,16,4>."""
    m = re.match(r"_Z(\d+)", mangled)
    if not m:
        return mangled
    start = m.end()
    name = mangled[start:start + int(m.group(1))]
    rest = mangled[start + int(m.group(1)):]
    if rest.startswith("I"):
        args = re.findall(r"L[ib](-?\d+)E", rest[:rest.find("EEv") + 1] if "EEv" in rest else rest)
        name += "<" + ",".join(args) + ">"
    return name


def main():
    limit = 128
    report = None
    args = sys.argv[1:]
    while args:
        if args[0] == "--limit" and len(args) > 1:
            limit = int(args[1])
        elif args[0] == "--report" and len(args) > 1:
            report = args[1]
        else:
            sys.exit(__doc__)
        args = args[2:]
    if report is None:
        if not nvcc_found():
            print("1..1")
            print("ok 1 - # SKIP no nvcc: the CUDA engine is not built here")
            return 0
        error = build_report()
        if error is not None:
            print("1..1")
            print(f"not ok 1 - make {REPORT}")
            for d in error.splitlines()[-10:]:
                print(f"# {d}")
            return 1
        report = os.path.join(ROOT, REPORT)
    with open(report) as f:
        got = frames(f.read())

    kernels = {}
    for (name, arch), size in got.items():
        if BY_VALUE.search(name):
            kernels.setdefault(name, {})[arch] = size
    lines = []
    if not kernels:
        lines.append((False, f"{report}: a kernel taking kmg_args by value", "none found"))
    for name in sorted(kernels, key=lambda n: (readable(n), n)):
        sizes = kernels[name]
        each = ", ".join(f"{sizes[a]} ({a})" for a in sorted(sizes))
        allowed = ALLOWED.get(readable(name).split("<")[0], limit)
        lines.append((max(sizes.values()) < allowed,
                      f"{readable(name)}: stack frame {each} bytes (limit {allowed})", None))
    print(f"1..{len(lines)}")
    failed = 0
    for i, (ok, text, detail) in enumerate(lines, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {text}")
        if not ok:
            failed += 1
            if detail:
                print(f"# {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
