"""`make bench`: run every benchmark script, show its output as it comes, then print
one table of every goal line (``measure: value (goal X) OK|MISS``) with the date,
the machine and each script's wall time -- the table the README quotes.

    python benchmarks/_run_all.py [--only NAME ...] [--table-out FILE]

A script that fails is reported in the table (and the exit status is 1); the rest
still run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOAL = re.compile(r"^(?P<measure>.+): (?P<value>.+) \(goal (?P<goal>[^)]*)\) (?P<ok>OK|MISS)\s*$")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        memory = f", {mem:.0f} GiB"
    except (ValueError, OSError):
        memory = ""
    return (f"{os.cpu_count()} cores ({cpu}){memory}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="script names (without .py)")
    ap.add_argument("--table-out", type=Path, default=None)
    args = ap.parse_args()
    scripts = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_"))
    if args.only:
        scripts = [p for p in scripts if p.stem in set(args.only)]
    started = datetime.datetime.now(datetime.UTC)
    rows: list[tuple[str, str, str, str, str]] = []
    walls: list[str] = []
    failed = False
    for script in scripts:
        print(f"== {script.name}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=HERE.parent)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = GOAL.match(line.rstrip("\n"))
            if m:
                rows.append((script.stem, m["measure"], m["value"], m["goal"], m["ok"]))
        code = proc.wait()
        took = time.monotonic() - t0
        walls.append(f"{script.stem} {took:.0f} s")
        if code != 0:
            failed = True
            rows.append((script.stem, "(the script failed)", f"exit {code}", "-", "MISS"))
    table = [f"make bench, {started:%Y-%m-%d %H:%M} UTC, {machine()}", "",
             "| script | measure | value | goal | |", "|---|---|---|---|---|"]
    table += [f"| `{s}` | {m} | {v} | {g} | {ok} |" for s, m, v, g, ok in rows]
    misses = sum(r[4] == "MISS" for r in rows)
    table += ["", f"{len(rows) - misses} OK, {misses} MISS; wall per script: "
              + ", ".join(walls)]
    text = "\n".join(table)
    print("\n" + text)
    if args.table_out:
        args.table_out.write_text(text + "\n", "utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
