#!/usr/bin/env python3
"""The measuring half of `scripts/bench-agent.sh` (Python standard library only).

  bench_agent.py --orch BIN --cli CLAUDE --stub STUB --out DIR [--jobs N] [--warmup W]
                 [--sandbox bwrap|none]

What the real Claude Code CLI costs a job over the stub agent. Two worlds, alike but for the
agent: a bare remote with one commit on `main`, one repo without a serial gate, an analyst job
per task. In one, the agent is scripts/stub-agent (stream-json); in the other, the pinned CLI
with orch's default argv, talking to a scripted Messages API on loopback (this script serves
it: the analyst writes its four files in one turn of four `Write` calls, then says so; the
answers are immediate, so what is measured is the CLI, not a model). For each world, W warm-up
then N tasks are added and their analyst job run in the foreground with `orch job run <id>`
(clone or fetch, worktree, the agent, commit, push, advance: the whole supervisor), one at a
time. Reports per job: the supervisor's wall time and the agent's own run time
(`agent_runs.duration_ms`), median and p90, and the difference of the medians: the per-job
overhead the real CLI adds. Writes DIR/results.json.
"""

import argparse
import http.server
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "ANTHROPIC_", "CLAUDE_"))}


class Fake(http.server.BaseHTTPRequestHandler):
    """Messages API: the analyst's script, streamed as server-sent events."""

    protocol_version = "HTTP/1.1"
    counter = 0

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(404, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        if "count_tokens" in self.path:
            return self.reply(200, b'{"input_tokens":100}')
        msgs = json.dumps(body.get("messages", []))
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")

        def after(marker):
            i = msgs.find(marker)
            if i < 0:
                return ""
            rest = msgs[i + len(marker):]
            return rest[: min([j for j in (rest.find(c) for c in ' "\\') if j >= 0] or [len(rest)])]

        cwd, wi = after("Primary working directory: "), after("Work item: ")
        Fake.counter += 1
        n = Fake.counter
        if turn == 0:
            d = f"{cwd}/docs/work-items/{wi}"
            front = f"---\nwork_item: {wi}\nstage: analysis\nrun_id: {n}\n---\n"
            content = [{"type": "tool_use", "id": f"toolu_{n}_{k}", "name": "Write",
                        "input": {"file_path": f"{d}/{f}", "content": front + "# x\n"}}
                       for k, f in enumerate(["01-brd.md", "02-trz.md", "03-acceptance-criteria.md"])]
            content.append({"type": "tool_use", "id": f"toolu_{n}_4", "name": "Write",
                            "input": {"file_path": f"{d}/04-test-plan.yaml",
                                      "content": f"work_item: {wi}\ncases: []\n"}})
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "The analysis is written."}], "end_turn"
        usage = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50,
                 "cache_creation_input_tokens": 7}
        mid = f"msg_{n}"
        ev = [("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": body.get("model", "claude-x"),
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})]
        for i, c in enumerate(content):
            if c["type"] == "text":
                start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": c["text"]}
            else:
                start = {"type": "tool_use", "id": c["id"], "name": c["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(c["input"])}
            ev += [("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
        ev += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 20}}),
               ("message_stop", {"type": "message_stop"})]
        data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in ev).encode()
        self.reply(200, data, "text/event-stream")


def git(*args, cwd=None):
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@orch.invalid", *args],
                   cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def world(root, name, agent_argv, sandbox, stub_state):
    w = os.path.join(root, name)
    remote, seed = os.path.join(w, "remote.git"), os.path.join(w, "seed")
    os.makedirs(os.path.join(w, "home"))
    git("init", "-q", "--bare", "-b", "main", remote)
    git("clone", "-q", remote, seed)
    with open(os.path.join(seed, "README.md"), "w") as f:
        f.write("bench\n")
    git("checkout", "-q", "-b", "main", cwd=seed)
    git("add", "-A", cwd=seed)
    git("commit", "-qm", "initial", cwd=seed)
    git("push", "-q", "origin", "main", cwd=seed)
    agent = "agent:\n  env_allow: [ANTHROPIC_API_KEY]\n  max_attempts: 1\n"
    if agent_argv:
        agent += f"  argv: {json.dumps(agent_argv)}\n"
    if stub_state:
        agent += f"  sandbox_writable: [{json.dumps(stub_state)}]\n"
    cfg = os.path.join(w, "orch.yaml")
    with open(cfg, "w") as f:
        f.write(f"state_dir: {json.dumps(os.path.join(w, 'state'))}\nmax_concurrency: 1\n{agent}"
                f"repos:\n  - name: shop\n    remote: {json.dumps(remote)}\n    prefix: SHOP\n"
                f"    serial_gate: false\n")
    return w, cfg


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(orch, cfg, env, n, warmup, label):
    walls, agents = [], []
    for i in range(warmup + n):
        r = subprocess.run([orch, "--config", cfg, "task", "add", "--repo", "shop", "--title", f"t{i}",
                            "--json"], env=env, capture_output=True, text=True, check=True)
        wi = json.loads(r.stdout)["work_item"]
        show = json.loads(subprocess.run([orch, "--config", cfg, "task", "show", wi, "--json"], env=env,
                                         capture_output=True, text=True, check=True).stdout)
        job = show["jobs"][0]["id"]
        t0 = time.monotonic()
        r = subprocess.run([orch, "--config", cfg, "job", "run", str(job)], env=env,
                           capture_output=True, text=True)
        wall = (time.monotonic() - t0) * 1000
        if r.returncode != 0:
            sys.exit(f"bench-agent: {label}: `orch job run {job}` exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        if i >= warmup:
            walls.append(wall)
    db = sqlite3.connect(os.path.join(os.path.dirname(cfg), "state", "orch.db"))
    rows = db.execute("SELECT duration_ms, fault FROM agent_runs ORDER BY id").fetchall()
    done = db.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0]
    if done != warmup + n or any(f is not None for _, f in rows):
        sys.exit(f"bench-agent: {label}: {done} of {warmup + n} jobs done, faults {rows}")
    agents = [d for d, _ in rows[warmup:]]
    return walls, agents


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--orch", required=True)
    p.add_argument("--cli", required=True)
    p.add_argument("--stub", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--sandbox", choices=["bwrap", "none"], default="bwrap")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    root = tempfile.mkdtemp(prefix="bench-agent-", dir=os.path.abspath(a.out))
    stub_state = os.path.join(root, "stub-state")
    os.makedirs(stub_state)
    results = {"jobs": a.jobs, "sandbox": a.sandbox, "loadavg_before": os.getloadavg()[0]}
    for label, argv in [("stub", [a.stub, "--print", "--output-format", "stream-json"]), ("claude", None)]:
        w, cfg = world(root, label, argv, a.sandbox, stub_state if label == "stub" else None)
        env = dict(BASE_ENV, ORCH_AGENT_SANDBOX=a.sandbox, ORCH_LOG="warn", STUB_STATE_DIR=stub_state,
                   PATH=os.path.dirname(a.cli) + os.pathsep + BASE_ENV.get("PATH", ""),
                   HOME=os.path.join(w, "home"), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-bench",
                   CLAUDE_CODE_MAX_RETRIES="0", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1")
        walls, agents = measure(a.orch, cfg, env, a.jobs, a.warmup, label)
        results[label] = {"job_wall_ms_median": statistics.median(walls), "job_wall_ms_p90": pct(walls, 90),
                          "agent_ms_median": statistics.median(agents), "agent_ms_p90": pct(agents, 90)}
        print(f"{label:7} job wall median {results[label]['job_wall_ms_median']:7.0f} ms  "
              f"p90 {results[label]['job_wall_ms_p90']:7.0f} ms   agent run median "
              f"{results[label]['agent_ms_median']:7.0f} ms  p90 {results[label]['agent_ms_p90']:7.0f} ms",
              flush=True)
    over = results["claude"]["job_wall_ms_median"] - results["stub"]["job_wall_ms_median"]
    agent_over = results["claude"]["agent_ms_median"] - results["stub"]["agent_ms_median"]
    results["overhead_ms_per_job"] = over
    results["agent_overhead_ms_per_job"] = agent_over
    results["loadavg_after"] = os.getloadavg()[0]
    print(f"the real CLI adds {over:.0f} ms per job (median job wall), {agent_over:.0f} ms of it in "
          f"the agent run itself; sandbox {a.sandbox}, {a.jobs} jobs each, "
          f"load {results['loadavg_before']:.2f} -> {results['loadavg_after']:.2f}")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    srv.shutdown()


if __name__ == "__main__":
    main()
