#!/usr/bin/env python3
"""Where the machine's CPU goes while the broker is under load: the #17 question "is it full?".

  python3 scripts/cpu-split.py LOADGEN SKILLBOX STAGING_DIR [SECONDS] [CONCURRENCY]

Runs `LOADGEN --bin SKILLBOX --concurrency CONCURRENCY --seconds SECONDS --local-runs 0` (8 and 10
by default) with `TMPDIR=STAGING_DIR`, and reads `/proc/stat` and every process's `/proc/PID/stat`
2.5 s into the level and again 0.2 s before its end. Prints the machine's columns (user, system,
idle, steal, ...) and, per process, its own CPU and that of the children it reaped in that window:
the broker's children (spares, children, their hashing threads) are reaped by the broker, so its
"reaped" column is all of them. A process is matched across the two readings by pid and start
time, so a pid reused in between (a kernel worker renamed by the work it runs, a new child) is
counted from zero, not from another process's total. Then each share as milliseconds a request at
the level's rate. A report, not a test: nothing here passes or fails on a figure.
"""
import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
COLUMNS = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def machine():
    with open("/proc/stat") as f:
        return dict(zip(COLUMNS, (int(x) for x in f.readline().split()[1:9])))


def processes():
    """{(pid, start time): (comm, own ticks, reaped children's ticks)}"""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        # Fields from the state on (field 3): utime..cstime are 14..17, starttime 22.
        f = s[s.rindex(")") + 2:].split()
        utime, stime, cutime, cstime = (int(x) for x in f[11:15])
        out[(int(pid), f[19])] = (comm, utime + stime, cutime + cstime)
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[1])
    loadgen, skillbox, staging = sys.argv[1:4]
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    concurrency = sys.argv[5] if len(sys.argv) > 5 else "8"
    if seconds < 4:
        sys.exit("SECONDS: at least 4 (the window starts 2.5 s in)")
    p = subprocess.Popen(
        [loadgen, "--bin", skillbox, "--concurrency", concurrency, "--seconds", str(int(seconds)),
         "--local-runs", "0"],
        env={**os.environ, "TMPDIR": staging}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    # loadgen warms up for a second before the level; the window starts well inside it.
    time.sleep(2.5)
    m0, p0, t0 = machine(), processes(), time.monotonic()
    time.sleep(seconds - 2.7)
    m1, p1, t1 = machine(), processes(), time.monotonic()
    out, _ = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{loadgen} exited {p.returncode}:\n{out[-2000:]}")
    row = next((line for line in out.splitlines() if line.startswith(f"| {concurrency} |")), None)
    if row is None:
        sys.exit(f"no level {concurrency} in:\n{out[-2000:]}")
    fields = [x.strip() for x in row.strip("|").split("|")]
    if fields[6] != "0":
        sys.exit(f"errors in the run: {row}")
    rate = float(fields[2])
    total = sum(m1[k] - m0[k] for k in COLUMNS)
    window = t1 - t0
    print(row)
    print(f"window {window:.2f} s, {total / window / HZ:.2f} CPUs busy or idle; "
          f"{rate:.0f} req/s, so {1000 * total / HZ / window / rate:.2f} CPU-ms a request")

    def ms(ticks):
        return 1000 * ticks / HZ / window / rate

    for k in COLUMNS:
        d = m1[k] - m0[k]
        if d:
            print(f"  {k:8s} {100 * d / total:5.1f} %  {ms(d):5.2f} ms a request")
    by_comm = {}
    for key, (comm, own, reaped) in p1.items():
        before = p0.get(key)
        d_own = own - (before[1] if before else 0)
        d_reaped = reaped - (before[2] if before else 0)
        name = "kworker/*" if comm.startswith("kworker/") else comm
        o, r = by_comm.get(name, (0, 0))
        by_comm[name] = (o + d_own, r + d_reaped)
    print("  process                    own                  reaped children")
    for name, (o, r) in sorted(by_comm.items(), key=lambda kv: -sum(kv[1])):
        if o + r >= total / 500:
            print(f"  {name:24s} {100 * o / total:5.1f} % {ms(o):5.2f} ms   "
                  f"{100 * r / total:5.1f} % {ms(r):5.2f} ms")


if __name__ == "__main__":
    main()
