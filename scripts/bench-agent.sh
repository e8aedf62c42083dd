#!/usr/bin/env bash
# Benchmark: the per-job overhead the real Claude Code CLI adds over the stub agent.
#
#   bash scripts/bench-agent.sh [--jobs N] [--warmup W] [--sandbox bwrap|none] [--bin ORCH]
#                               [--out DIR]
#
# Builds the release binary (unless --bin), installs the pinned CLI with
# scripts/install-claude-cli.sh, then runs scripts/bench_agent.py: N analyst jobs (default 20,
# after W warm-ups) run one at a time with `orch job run <id>` in a world whose agent is the
# stub, and N in a world alike whose agent is the real CLI with orch's default argv against a
# scripted Messages API on loopback that answers at once. Reports the median and p90 of the
# supervisor's wall time and of the agent's run per job, and the difference of the medians.
# Everything stays on this machine; nothing reaches a network address but loopback.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
jobs=20 warmup=2 sandbox=bwrap bin="" out=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --sandbox) sandbox=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-agent: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [[ -z $bin ]]; then
    (cd "$here" && cargo build --release --quiet)
    bin="$here/target/release/orch"
fi
cli="$("$here/scripts/install-claude-cli.sh")"
out="${out:-$(mktemp -d /var/tmp/bench-agent.XXXXXX)}"
python3 "$here/scripts/bench_agent.py" --orch "$bin" --cli "$cli" --stub "$here/scripts/stub-agent" \
    --out "$out" --jobs "$jobs" --warmup "$warmup" --sandbox "$sandbox"
echo "results: $out/results.json"
