#!/usr/bin/python3
"""The kernels that run every iteration of a fit keep their arguments where
the launch put them.  A kernel that takes kmg_args by value and hands a
reference to it to an out-of-line function gets a private copy of all 544
bytes on every thread's stack unless the parameter is __grid_constant__:
on 1M x 8 rows that copy was 36 MB of local stores a pass, more than the
rows themselves, and a third of the iteration (kernels/bench/NOTES.md, "The
narrow pass, round 12"); kmg_finalize1_kernel and kmg_reduce_finalize_kernel
still hand the reference to kmg_finalize_block out of line (the narrow pass
now runs the end inline).  This compiles the files of those kernels for
sm_90a with ptxas -v and fails any kernel taking kmg_args by value whose
stack frame could hold such a copy.  Prints TAP, one line per kernel;
without nvcc (the CUDA engine is optional) one skipped line.

    check_kernel_frames.py [--limit BYTES]    (default 128: the frames today
                                               are 0 or 32 bytes)
"""
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The files of the passes and ends a fused iteration launches (assign/dispatch.cu).
FILES = ["kernels/assign/narrow.cu", "kernels/assign/bytes.cu", "kernels/assign/wide.cu",
         "kernels/assign/direct.cu", "kernels/assign/reduce.cu", "kernels/update/finalize.cu"]



def nvcc_flags():
    """The Makefile's NVCCFLAGS for Hopper only (make print-nvccflags CUDA_ARCHS=90), then ptxas -v."""
    run = subprocess.run(["make", "-s", "--no-print-directory", "CUDA_ARCHS=90", "print-nvccflags"],
                         cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0 or not run.stdout.strip():
        sys.exit("make print-nvccflags failed: " + run.stdout + run.stderr)
    return shlex.split(run.stdout) + ["-Xptxas", "-v", "-c", "-o", os.devnull]


def nvcc_path():
    path = shutil.which("nvcc")
    if path is None and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        path = "/usr/local/cuda/bin/nvcc"
    return path


def frames(nvcc, flags, src):
    """{mangled kernel name: stack frame bytes} of src's entry functions, or an error text."""
    run = subprocess.run([nvcc] + flags + [src], cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        return run.stdout + run.stderr
    out = {}
    entries = set(re.findall(r"Compiling entry function '([^']+)'", run.stderr))
    current = None
    for line in run.stderr.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and current in entries:
            out[current] = int(m.group(1))
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
        args = re.findall(r"Li(-?\d+)E", rest[:rest.find("EEv") + 1] if "EEv" in rest else rest)
        name += "<" + ",".join(args) + ">"
    return name


def main():
    limit = 128
    if len(sys.argv) == 3 and sys.argv[1] == "--limit":
        limit = int(sys.argv[2])
    nvcc = nvcc_path()
    if nvcc is None:
        print("1..1")
        print("ok 1 - # SKIP no nvcc: the CUDA engine is not built here")
        return 0
    flags = nvcc_flags()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = dict(zip(FILES, pool.map(lambda f: frames(nvcc, flags, f), FILES)))
    lines = []
    for src in FILES:
        got = results[src]
        if isinstance(got, str):
            lines.append((False, f"{src} compiles for sm_90a", got))
            continue
        taking = {k: v for k, v in got.items() if "8kmg_args" in k}
        if not taking:
            lines.append((False, f"{src}: a kernel taking kmg_args by value", "none found"))
        for name in sorted(taking):
            lines.append((taking[name] < limit,
                          f"{src}: {readable(name)} has a {taking[name]}-byte stack frame (limit {limit})",
                          None))
    print(f"1..{len(lines)}")
    failed = 0
    for i, (ok, text, detail) in enumerate(lines, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {text}")
        if not ok:
            failed += 1
            if detail:
                for d in detail.splitlines()[-10:]:
                    print(f"# {d}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
