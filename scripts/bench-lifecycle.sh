#!/usr/bin/env bash
# Benchmark of the install lifecycle, every figure against a peer timed in the same run:
#   1. install of a typical package (25 files, ~250 KB tar.gz, built with Python's tarfile/gzip
#      writers) from a loopback HTTPS index, end to end, against `skillbox fetch` of the same
#      package (alternated; medians); target: the lifecycle adds at most 5 ms;
#   2. withdraw of a version 1,000 agents use (target < 1 s);
#   3. list and provenance with 10,000 recorded versions (target < 50 ms each);
#   4. with SKILLS_CLI=1, the `skills` npm CLI (skills@1.7.4) adding the same skill.
# Usage: scripts/bench-lifecycle.sh [ROUNDS]   (default 30). Needs openssl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-30}"
cargo build --release --locked --quiet
BIN="$PWD/target/release/skillbox"
WORK="$(mktemp -d)"
trap 'kill "${SERVER_PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# Test PKI: a CA and a leaf for 127.0.0.1.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$WORK/ca.pem" \
  -days 2 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$WORK/leaf.key" -out "$WORK/leaf.csr" \
  -subj "/CN=127.0.0.1" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$WORK/ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
  -CAcreateserial -out "$WORK/leaf.pem" -days 2 -extfile "$WORK/ext" 2>/dev/null

python3 - "$WORK" <<'PY'
import base64, gzip, hashlib, io, json, os, sys, tarfile
work = sys.argv[1]
def package(version):
    files = {"SKILL.md": b"---\nname: demo\ndescription: A benchmark skill\n---\nRead the docs.\n"}
    rnd = __import__("random").Random(7)
    for i in range(24):
        body = base64.b64encode(bytes(rnd.getrandbits(8) for _ in range(10300))).decode()
        files[f"docs/part-{i:02}.md"] = (f"# Part {i} (v{version})\n\n" + body + "\n").encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as t:
            for name, data in files.items():
                info = tarfile.TarInfo(name); info.size = len(data); info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
os.makedirs(f"{work}/www/.well-known/agent-skills", exist_ok=True)
for v in (1, 2):
    data = package(v)
    open(f"{work}/www/demo-{v}.tar.gz", "wb").write(data)
    open(f"{work}/digest-{v}", "w").write("sha256:" + hashlib.sha256(data).hexdigest())
print(f"package: {len(package(1))} bytes tar.gz, 25 files", file=sys.stderr)
PY

publish() { # publish VERSION: the index lists demo at that version
  python3 - "$WORK" "$1" <<'PY'
import json, sys
work, v = sys.argv[1], sys.argv[2]
d = open(f"{work}/digest-{v}").read()
idx = {"$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
       "skills": [{"name": "demo", "type": "archive", "description": "A benchmark skill",
                   "url": f"/demo-{v}.tar.gz", "digest": d}]}
open(f"{work}/www/.well-known/agent-skills/index.json", "w").write(json.dumps(idx))
PY
}
publish 1

python3 - "$WORK" <<'PY' &
import http.server, ssl, sys, functools
work = sys.argv[1]
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
    def guess_type(self, path):
        return "application/gzip" if path.endswith(".gz") else "application/json"
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=f"{work}/www"))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(f"{work}/leaf.pem", f"{work}/leaf.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
open(f"{work}/port", "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
SERVER_PID=$!
for _ in $(seq 50); do [ -s "$WORK/port" ] && break; sleep 0.1; done
PORT="$(cat "$WORK/port")"
INDEX="https://127.0.0.1:$PORT/.well-known/agent-skills/index.json"
NET=(--ca-file "$WORK/ca.pem" --allow-origin "https://127.0.0.1:$PORT" --allow-destination "127.0.0.1:$PORT")

python3 - "$WORK" "$BIN" "$INDEX" "$ROUNDS" "${NET[@]}" <<'PY'
import json, os, shutil, sqlite3, statistics, subprocess, sys, time
work, binary, index, rounds, net = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
def run(args, ok=(0,)):
    t = time.perf_counter()
    p = subprocess.run([binary, *args], capture_output=True)
    dt = (time.perf_counter() - t) * 1000
    if p.returncode not in ok:
        sys.exit(f"{args[0]} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return dt, p
def fresh(name):
    d = f"{work}/{name}"; shutil.rmtree(d, ignore_errors=True); return d
def publish(v):
    d = open(f"{work}/digest-{v}").read()
    idx = {"$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
           "skills": [{"name": "demo", "type": "archive", "description": "A benchmark skill",
                       "url": f"/demo-{v}.tar.gz", "digest": d}]}
    open(f"{work}/www/.well-known/agent-skills/index.json", "w").write(json.dumps(idx))
    return d

# 1. install vs fetch, alternated, each with an empty cache; install into an existing, empty
# store (a copy of one `gc` initialised, made outside the timing), as on a host in use.
publish(1)
template = fresh("store-template")
run(["gc", "--store", template])
def store_copy():
    d = fresh("store"); shutil.copytree(template, d, symlinks=True); return d
fetch, install = [], []
for i in range(rounds + 2):
    a, _ = run(["fetch", index, "demo", "--cache-dir", fresh("cache"), *net])
    b, _ = run(["install", index, "demo", "--store", store_copy(), "--agent", f"a={fresh('agent')}", *net])
    if i >= 2:  # two warm-up rounds
        fetch.append(a); install.append(b)
mf, mi = statistics.median(fetch), statistics.median(install)
print(f"fetch   median {mf:7.2f} ms  (min {min(fetch):.2f})")
print(f"install median {mi:7.2f} ms  (min {min(install):.2f})")
print(f"lifecycle adds {mi - mf:+.2f} ms (target <= 5 ms); ratio {mi / mf:.2f}")

# 2. withdraw with 1,000 agents on the version.
times = []
for rep in range(3):
    store = fresh("store-w"); agents = fresh("agents-w"); os.makedirs(agents)
    publish(1)
    args = ["install", index, "demo", "--store", store, *net]
    for n in range(1000):
        args += ["--agent", f"a{n}={agents}/a{n}"]
    run(args)
    d2 = publish(2)
    run(["update", "--store", store, *net])
    dt, p = run(["withdraw", f"demo@{d2}", "--reason", "bench", "--store", store, "--json"])
    moved = len(json.loads(p.stdout)["agents"])
    assert moved == 1000, moved
    times.append(dt)
print(f"withdraw, 1000 agents moved: median {statistics.median(times):.1f} ms over 3 (target < 1000 ms)")

# 3. list and provenance with 10,000 recorded versions. One real install gives the row shape;
# 9,999 more are recorded as copies with their own digests and events (the records a long
# history leaves), so the figure is about the records, not 10,000 downloads.
store = fresh("store-l"); publish(1)
run(["install", index, "demo", "--store", store, "--agent", f"a={fresh('agent-l')}", *net])
db = sqlite3.connect(f"{store}/records.db")
cols = [r[1] for r in db.execute("PRAGMA table_info(versions)")]
row = dict(zip(cols, db.execute("SELECT * FROM versions").fetchone()))
ev = db.execute("SELECT time, skill, kind, actor, detail FROM events").fetchall()
seq_e = db.execute("SELECT MAX(seq) FROM events").fetchone()[0]
with db:
    for i in range(1, 10000):
        r = dict(row); r["digest"] = "sha256:%064x" % i; r["seq"] = i + 1; r["stored"] = 0
        db.execute(f"INSERT INTO versions ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})", [r[c] for c in cols])
        for (t, s, k, a, d) in ev:
            seq_e += 1
            db.execute("INSERT INTO events (seq, time, skill, digest, kind, actor, detail) VALUES (?,?,?,?,?,?,?)", (seq_e, t, s, r["digest"], k, a, d))
db.close()
def med(args, n=15):
    xs = [run(args)[0] for _ in range(n)]
    return statistics.median(xs)
ref = med(["--version"])
print(f"skillbox --version (process start, the floor): {ref:.2f} ms")
for args in (["list", "--store", store], ["list", "--json", "--store", store],
             ["provenance", "demo", "--store", store], ["provenance", f"demo@sha256:{5000:064x}", "--json", "--store", store],
             ["status", "--store", store]):
    print(f"{' '.join(a for a in args if a != store and not a.startswith('demo@')):<28} median {med(args):6.2f} ms (target < 50 ms)")
PY

if [ "${SKILLS_CLI:-0}" = 1 ]; then
  # skills@1.7.4 needs Node 22 (fs/promises glob); the node@22 package brings it.
  npm install --silent --prefix "$WORK/npm" skills@1.7.4 node@22 >/dev/null
  export PATH="$WORK/npm/node_modules/.bin:$PATH"
  python3 - "$WORK" "$BIN" "$INDEX" "$ROUNDS" "https://127.0.0.1:$PORT" "${NET[@]}" <<'PY'
import os, shutil, statistics, subprocess, sys, time
work, binary, index, rounds, origin, net = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:]
cli = f"{work}/npm/node_modules/.bin/skills"
def timed(cmd, env=None):
    # In the scratch directory: the skills CLI writes skills-lock.json into its working directory.
    t = time.perf_counter(); p = subprocess.run(cmd, capture_output=True, env=env, cwd=work)
    if p.returncode != 0: sys.exit(f"{cmd[0]} failed: {p.stderr.decode()[-2000:]}")
    return (time.perf_counter() - t) * 1000
sk, sb = [], []
for i in range(min(rounds, 10) + 1):
    home = f"{work}/home"; shutil.rmtree(home, ignore_errors=True); os.makedirs(home)
    env = dict(os.environ, HOME=home, NODE_EXTRA_CA_CERTS=f"{work}/ca.pem", DISABLE_TELEMETRY="1", DO_NOT_TRACK="1")
    a = timed([cli, "add", origin, "--skill", "demo", "-a", "claude-code", "-y", "--copy"], env)
    shutil.rmtree(f"{work}/s", ignore_errors=True)
    b = timed([binary, "install", index, "demo", "--store", f"{work}/s", "--agent", f"claude-code={home}/.claude/skills2", *net])
    if i: sk.append(a); sb.append(b)
print(f"skills add (npm skills@1.7.4) median {statistics.median(sk):7.2f} ms")
print(f"skillbox install            median {statistics.median(sb):7.2f} ms")
PY
fi
