#!/usr/bin/env python3
"""Before/after timing of `skillbox extract` (the CLI, a fresh confined child per call) for two
builds, alternated in one sitting, with the peer timed in the same loop: sha256 of the artifact,
bsdtar, sha256 of every extracted file (examples/sha256_files, SHA instructions).

  python3 scripts/throughput-ab.py REPS OUT_DIR HASHER OLD_CLI NEW_CLI ARTIFACT...

Prints medians (ms), new/old, each build's ratio to the peer, and each build's peak RSS (the CLI
and the child it reaps, getrusage RUSAGE_CHILDREN in a fresh process). A report, not a test.
The two builds run from copies made side by side at the start (scripts/fresh_copies.py).
"""
import hashlib, itertools, os, resource, shutil, statistics, subprocess, sys, time

from fresh_copies import fresh_copies

reps, outb, hasher = int(sys.argv[1]), sys.argv[2], sys.argv[3]
old, new = fresh_copies(sys.argv[4:6])
arts = sys.argv[6:]
bins = [old, new]
digs = {a: hashlib.sha256(open(a, 'rb').read()).hexdigest() for a in arts}
os.makedirs(outb, exist_ok=True)
out = os.path.join(outb, f'ab-out-{os.getpid()}')

def cli(b, a):
    return [b, 'extract', a, '--digest', 'sha256:' + digs[a], '--out', out, '--json']

def run(cmds):
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    for c in cmds:
        if c == 'mkdir':
            os.mkdir(out)
            continue
        p = subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert p.returncode == 0, (c, p.returncode, p.stderr.decode(errors='replace')[-2000:])
    return (time.perf_counter() - t) * 1000

def peer(a):
    return [[hasher, a], 'mkdir', ['bsdtar', '--no-same-owner', '-xf', a, '-C', out], [hasher, out]]

def rss(cmd):
    shutil.rmtree(out, ignore_errors=True)
    code = ("import resource,subprocess,sys;"
            "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    r = subprocess.run([sys.executable, '-c', code] + cmd, capture_output=True, text=True)
    return int(r.stdout.strip()) / 1024

ORDERS = list(itertools.permutations([('old', old), ('new', new), ('peer', None)]))
res = {}
for r in range(reps):
    for a in arts:
        # Every order of the three in turn (give REPS as a multiple of 6): each run then comes
        # first, second and last, and right after each of the others, as often as the others.
        # With old, new, peer and its reverse only, "new" never ran right after itself and
        # "old" and "peer" did, at every turn: the same build as both came out 2 to 7 % apart.
        order = ORDERS[r % len(ORDERS)]
        for name, b in order:
            res.setdefault((a, name), []).append(run(peer(a) if b is None else [cli(b, a)]))
print(f"{'artifact':24s} {'old ms':>8s} {'new ms':>8s} {'peer ms':>8s} {'new/old':>8s} "
      f"{'old/peer':>8s} {'new/peer':>8s} {'old RSS':>8s} {'new RSS':>8s}")
paired = {}
for a in arts:
    o, n, p = (statistics.median(res[(a, k)]) for k in ('old', 'new', 'peer'))
    # Each repetition's own ratios (its old, new and peer ran back to back), then their median:
    # a machine slower for a while slows all three runs of a repetition.
    paired[a] = tuple(statistics.median(x / y for x, y in zip(res[(a, k)], res[(a, 'peer')]))
                      for k in ('old', 'new'))
    ro, rn = rss(cli(old, a)), rss(cli(new, a))
    print(f"{os.path.basename(a):24s} {o:8.1f} {n:8.1f} {p:8.1f} {n/o:8.3f} {o/p:8.3f} {n/p:8.3f} "
          f"{ro:7.1f}M {rn:7.1f}M")
print(f"{'paired, per repetition':24s} {'old/peer':>8s} {'new/peer':>8s}")
for a in arts:
    print(f"{os.path.basename(a):24s} {paired[a][0]:8.3f} {paired[a][1]:8.3f}")
shutil.rmtree(out, ignore_errors=True)
