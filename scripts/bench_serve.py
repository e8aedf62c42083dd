#!/usr/bin/env python3
"""The measuring half of `scripts/bench-serve.sh` (Python standard library only).

  bench_serve.py a --orch BIN --out DIR --runs N [--warmup 3]
      `orch ingest plane` of one signed delivery that is recorded and ignored (an issue moved
      to a state with no action), a fresh delivery id per run: median and max wall time, peak
      RSS (/usr/bin/time -f %M). Target: median <= 10 ms.
  bench_serve.py b --orch BIN --out DIR [--seconds 30] [--connections 16]
      `orch serve` on 127.0.0.1:0 and a load generator here: N keep-alive connections, each
      sending signed deliveries with distinct delivery ids back to back for S seconds.
      Reports deliveries/s, p50/p99/max latency, the server's peak RSS (VmHWM), and checks that
      the inbox holds exactly one accepted row per accepted answer. Targets: >= 1,000/s,
      peak RSS <= 40 MB.

Each part prints its report and appends PASS/MISS lines to DIR/summary.txt. Exit status: 0 when
the part ran (targets met or not), 1 when a step or a correctness check failed.
"""

import argparse
import hashlib
import hmac
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

SECRET_VAR = "ORCH_BENCH_PLANE_HOOK_SECRET"
SECRET = "bench-plane-hook-secret"
PROJECT = "8b2c6a0e-5d1f-4c3b-9a7e-0f1e2d3c4b5a"
VERDICT = {True: "PASS", False: "MISS"}
# The measured commands see only the config and the secret they are given.
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
BASE_ENV[SECRET_VAR] = SECRET
BASE_ENV["ORCH_LOG"] = "warn"


def write_config(state):
    os.makedirs(state, exist_ok=True)
    cfg = os.path.join(state, "orch.yaml")
    with open(cfg, "w") as f:
        f.write(
            f"state_dir: {state}/state\n"
            "repos:\n"
            "  - name: shop\n"
            "    remote: /nonexistent/shop.git\n"
            "    prefix: SHOP\n"
            f"    plane_project: {PROJECT}\n"
            "tracker:\n"
            "  kind: plane\n"
            f"  webhook_secret_env: {SECRET_VAR}\n"
        )
    return cfg


def body(seq):
    """Plane's issue payload: issue `seq` moved to a state orch takes no action on."""
    return json.dumps(
        {
            "event": "issue",
            "action": "updated",
            "webhook_id": "0c5e2a4c-1111-4222-8333-944455556666",
            "workspace_id": "d2d97c94-a6ad-4012-b526-5577c0d7c769",
            "data": {
                "id": "1a2b3c4d-0000-4000-8000-%012d" % seq,
                "sequence_id": seq,
                "name": "Benchmark issue %d" % seq,
                "project": PROJECT,
                "state": {"id": "5e6f", "name": "In Progress", "color": "#60646C",
                          "group": "started"},
                "labels": [],
                "description_stripped": "A delivery of the serve benchmark.",
                "priority": "none",
            },
            "activity": {"actor": {"id": "u-1", "display_name": "Bench"}},
        },
        separators=(",", ":"),
    ).encode()


def sign(b):
    return hmac.new(SECRET.encode(), b, hashlib.sha256).hexdigest()


def summary(out, line):
    print(line)
    with open(os.path.join(out, "summary.txt"), "a") as f:
        f.write(line + "\n")


def load():
    """The 1-minute load average: on a shared 2-core machine, numbers mean little above ~2."""
    return "load average %.2f" % os.getloadavg()[0]


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


# --- A: orch ingest ---------------------------------------------------------------------------


def part_a(args):
    work = os.path.join(args.out, "a")
    cfg = write_config(work)
    b = body(4242)
    path = os.path.join(work, "body.json")
    with open(path, "wb") as f:
        f.write(b)
    sig = sign(b)

    def once(i):
        argv = ["/usr/bin/time", "-f", "%M", args.orch, "--config", cfg, "ingest", "plane",
                "--header", f"X-Plane-Delivery: bench-a-{i}",
                "--header", "X-Plane-Event: issue",
                "--header", f"X-Plane-Signature: {sig}",
                "--body", path, "--json"]
        t = time.perf_counter()
        p = subprocess.run(argv, env=BASE_ENV, capture_output=True, text=True)
        wall = (time.perf_counter() - t) * 1000
        if p.returncode != 0:
            sys.exit(f"orch ingest failed ({p.returncode}): {p.stdout}{p.stderr}")
        outcome = json.loads(p.stdout)["outcome"]
        if outcome != "ignored":
            sys.exit(f"expected an ignored delivery, got {outcome}: {p.stdout}")
        rss_kb = int(p.stderr.strip().splitlines()[-1])
        return wall, rss_kb

    def series(tag):
        walls, rss = [], []
        for i in range(args.warmup):
            once(f"{tag}-warm-{i}")
        for i in range(args.runs):
            w, r = once(f"{tag}-{i}")
            walls.append(w)
            rss.append(r)
        return walls, rss

    # The floor: starting the binary at all (and /usr/bin/time).
    floor = []
    for _ in range(args.runs):
        t = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-f", "%M", args.orch, "--version"], env=BASE_ENV,
                       capture_output=True, check=True)
        floor.append((time.perf_counter() - t) * 1000)
    # A1: each run is the only connection, so closing it checkpoints the WAL into the database
    # and deletes the WAL and its index (SQLite does that when the last connection closes).
    walls, rss = series("cold")
    # A2: another connection holds the database open, as `orch serve` or a running tick does.
    db_path = os.path.join(work, "state", "orch.db")
    holder = sqlite3.connect(db_path)
    holder.execute("SELECT count(*) FROM sqlite_master").fetchone()
    warm_walls, warm_rss = series("held")
    holder.close()
    rows = sqlite3.connect(db_path).execute(
        "SELECT count(*) FROM events WHERE outcome = 'ignored'").fetchone()[0]
    if rows != 2 * (args.runs + args.warmup):
        sys.exit(f"expected {2 * (args.runs + args.warmup)} ignored inbox rows, found {rows}")
    med = statistics.median(walls)
    held = statistics.median(warm_walls)
    print(f"A. orch ingest plane (one signed, ignored delivery; {args.runs} runs after "
          f"{args.warmup} warm-ups each; wall includes /usr/bin/time)")
    print(f"   A1 sole connection: median {med:.2f} ms  max {max(walls):.2f}  "
          f"min {min(walls):.2f}; peak RSS {max(rss) / 1024:.1f} MB")
    print(f"   A2 database held open elsewhere: median {held:.2f} ms  max {max(warm_walls):.2f}  "
          f"min {min(warm_walls):.2f}; peak RSS {max(warm_rss) / 1024:.1f} MB")
    print(f"   floor `/usr/bin/time orch --version`: median {statistics.median(floor):.2f} ms")
    print(f"   inbox: {rows} ignored rows; {load()}")
    summary(args.out, f"{VERDICT[med <= 10]} A1 ingest median {med:.2f} ms (target <= 10 ms); "
                      f"max {max(walls):.2f} ms; peak RSS {max(rss) / 1024:.1f} MB")
    summary(args.out, f"{VERDICT[held <= 10]} A2 ingest, database held open, median "
                      f"{held:.2f} ms; max {max(warm_walls):.2f} ms")
    return 0


# --- B: orch serve throughput -----------------------------------------------------------------


def start_server(orch, cfg):
    p = subprocess.Popen([orch, "--config", cfg, "serve", "--listen", "127.0.0.1:0"],
                         env=BASE_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        if line.startswith("listening on "):
            host, port = line.split()[-1].rsplit(":", 1)
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, (host, int(port))
    p.kill()
    sys.exit("orch serve did not print `listening on`")


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def read_response(sock, buf):
    """One response from `sock` (Content-Length framed); returns (status, rest of buffer)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection mid-body")
        rest += chunk
    return status, rest[length:]


def part_b(args):
    work = os.path.join(args.out, "b")
    cfg = write_config(work)
    server, addr = start_server(args.orch, cfg)
    # One payload, distinct delivery ids: the signature covers the body only.
    b = body(777)
    sig = sign(b)
    prefix = (f"POST /webhook/plane HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
              f"Content-Type: application/json\r\nX-Plane-Event: issue\r\n"
              f"X-Plane-Signature: {sig}\r\nContent-Length: {len(b)}\r\n").encode()
    stop_at = [0.0]
    results = [None] * args.connections
    errors = []
    start_gate = threading.Barrier(args.connections + 1)

    def client(k):
        lat, statuses, n = [], {}, 0
        try:
            s = socket.create_connection(addr)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            start_gate.wait()
            while time.perf_counter() < stop_at[0]:
                req = prefix + f"X-Plane-Delivery: bench-b-{k}-{n}\r\n\r\n".encode() + b
                t = time.perf_counter()
                s.sendall(req)
                status, buf = read_response(s, buf)
                lat.append(time.perf_counter() - t)
                statuses[status] = statuses.get(status, 0) + 1
                n += 1
            s.close()
        except Exception as e:  # noqa: BLE001 - reported, and the run fails
            errors.append(f"connection {k}: {e!r}")
        results[k] = (lat, statuses)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.connections)]
    for t in threads:
        t.start()
    # Every connection is open and waiting at the gate; the clock starts now.
    started = time.perf_counter()
    stop_at[0] = started + args.seconds
    start_gate.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    hwm = vm_hwm_kb(server.pid)
    threads_now = len(os.listdir(f"/proc/{server.pid}/task"))
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "killed after 10 s"

    lat = [x for r in results if r for x in r[0]]
    statuses = {}
    for r in results:
        if r:
            for s, c in r[1].items():
                statuses[s] = statuses.get(s, 0) + c
    per_conn = [len(r[0]) if r else 0 for r in results]
    accepted = statuses.get(200, 0) + statuses.get(202, 0)
    db = sqlite3.connect(os.path.join(work, "state", "orch.db"))
    inbox = db.execute("SELECT count(*) FROM events WHERE outcome != 'rejected'").fetchone()[0]
    outcomes = dict(db.execute("SELECT outcome, count(*) FROM events GROUP BY outcome").fetchall())
    rate = len(lat) / elapsed
    print(f"B. orch serve: {args.connections} keep-alive connections on loopback for "
          f"{elapsed:.1f} s, signed Plane deliveries with distinct ids")
    print(f"   deliveries: {len(lat)}  ({rate:.0f}/s)  statuses {statuses}")
    print(f"   per connection: min {min(per_conn)}  max {max(per_conn)}")
    if lat:
        print(f"   latency ms: p50 {pct(lat, 50) * 1000:.2f}  p99 {pct(lat, 99) * 1000:.2f}  "
              f"max {max(lat) * 1000:.2f}")
    print(f"   server peak RSS (VmHWM): {hwm / 1024:.1f} MB; threads at the end: {threads_now}")
    print(f"   inbox rows not rejected: {inbox} (accepted answers: {accepted}); by outcome: "
          f"{outcomes}")
    print(f"   server exit after SIGTERM: {code}; {load()}")
    failed = False
    for e in errors:
        print(f"   error: {e}")
        failed = True
    if inbox != accepted:
        print(f"   FAIL: {accepted} accepted answers but {inbox} accepted inbox rows")
        failed = True
    if code != 0:
        print("   FAIL: orch serve did not exit 0 on SIGTERM")
        failed = True
    if min(per_conn) == 0:
        print("   FAIL: a connection was never served")
        failed = True
    summary(args.out, f"{VERDICT[rate >= 1000]} B serve throughput {rate:.0f}/s "
                      f"(target >= 1000/s); p50 {pct(lat, 50) * 1000:.2f} ms, "
                      f"p99 {pct(lat, 99) * 1000:.2f} ms")
    summary(args.out, f"{VERDICT[hwm <= 40 * 1024]} B serve peak RSS {hwm / 1024:.1f} MB "
                      f"(target <= 40 MB)")
    summary(args.out, f"{VERDICT[inbox == accepted]} B inbox {inbox} rows == {accepted} "
                      f"accepted answers")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    a = sub.add_parser("a")
    a.add_argument("--orch", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--runs", type=int, default=30)
    a.add_argument("--warmup", type=int, default=3)
    b = sub.add_parser("b")
    b.add_argument("--orch", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--seconds", type=float, default=30)
    b.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return part_a(args) if args.part == "a" else part_b(args)


if __name__ == "__main__":
    sys.exit(main())
