#!/usr/bin/env python3
"""ptxas -v output (stdin) as a table: one line per kernel, in the order
compiled, with its registers, spill stores and loads, static shared memory
and stack frame (bytes).  Kernel names are demangled with c++filt when it is
there.  Used by `make resources`.

	kernel  regs  spill_st  spill_ld  smem  stack
"""
import re
import shutil
import subprocess
import sys

rows = []
cur = None
for line in sys.stdin:
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        cur = {"name": m.group(1)}
        rows.append(cur)
        continue
    if cur is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
        cur["stack"], cur["ss"], cur["sl"] = m.groups()
    m = re.search(r"Used (\d+) registers", line)
    if m:
        cur["regs"] = m.group(1)
        s = re.search(r"(\d+) bytes smem", line)
        cur["smem"] = s.group(1) if s else "0"

names = [r["name"] for r in rows]
if shutil.which("c++filt"):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    names = out.splitlines() or names
print("kernel\tregs\tspill_st\tspill_ld\tsmem\tstack")
for r, n in zip(rows, names):
    n = n.replace(" ", "")
    if n.startswith("void"):
        n = n[4:]
    print(f"{n}\t{r.get('regs', '?')}\t{r.get('ss', '?')}\t{r.get('sl', '?')}\t"
          f"{r.get('smem', '?')}\t{r.get('stack', '?')}")
