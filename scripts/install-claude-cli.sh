#!/usr/bin/env bash
# Install the pinned Claude Code CLI from npm into a directory of its own, for the tests that
# drive the real CLI against a fake Messages API on loopback (tests/it/real_agent.rs) and for
# the agent benchmark. Prints the path of the `claude` program it installed.
#
#   scripts/install-claude-cli.sh [DIR]      (default: target/claude-cli)
#
# The version is pinned so the tests see the stream, flags and error shapes they were written
# against; CLAUDE_CLI_VERSION overrides it. Needs node and npm (Debian's packages are enough:
# the package ships a native binary, node only runs the installer). Idempotent: a directory
# that already holds the pinned version is kept as it is.
set -euo pipefail
version="${CLAUDE_CLI_VERSION:-2.1.328}"
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$here/target/claude-cli}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bin="$dir/node_modules/.bin/claude"
platform_bin() {
    local arch
    case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) return 1 ;;
    esac
    local musl=""
    if ldd --version 2>&1 | grep -qi musl; then musl="-musl"; fi
    echo "$dir/node_modules/@anthropic-ai/claude-code-linux-$arch$musl/claude"
}
installed() {
    [[ -x $bin ]] && "$bin" --version 2>/dev/null | grep -q "^$version "
}
if ! installed; then
    if ! command -v npm >/dev/null; then
        echo "install-claude-cli: npm is missing; install Debian's nodejs and npm packages" >&2
        exit 1
    fi
    npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
        "@anthropic-ai/claude-code@$version" >&2
    if ! installed; then
        # An npm that skipped the package's postinstall leaves a placeholder at bin/claude.exe;
        # the postinstall only puts the platform package's native binary in its place.
        native="$(platform_bin)" || { echo "install-claude-cli: unsupported machine $(uname -m)" >&2; exit 1; }
        [[ -x $native ]] || { echo "install-claude-cli: no native binary at $native" >&2; exit 1; }
        ln -f "$native" "$dir/node_modules/@anthropic-ai/claude-code/bin/claude.exe" 2>/dev/null \
            || cp -f "$native" "$dir/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    fi
    installed || { echo "install-claude-cli: $bin does not report version $version" >&2; exit 1; }
fi
echo "$bin"
