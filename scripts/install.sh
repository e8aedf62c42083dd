#!/usr/bin/env bash
# install.sh — install orch on this host: the binary, the systemd units, the `orch` service user,
# a starter /etc/orch/orch.yaml, an empty /etc/orch/secrets.env (mode 0600) and empty credential
# files in /etc/orch/credentials/ (mode 0600, loaded by the units with LoadCredential=).
#
# Usage: scripts/install.sh [--bin PATH] [--prefix DIR] [--dry-run]
#
#   --bin PATH     install this orch binary instead of running `cargo build --release`
#   --prefix DIR   install into the staging root DIR instead of / (everything lands under DIR;
#                  no user is created and nothing is chowned; used by the tests and packagers)
#   --dry-run      print what would be done and change nothing
#
# Safe to run again (an upgrade): the binary and the units are replaced, while orch.yaml and
# secrets.env and the credential files are never overwritten. It does not start anything; the
# last lines say how.

set -euo pipefail

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
}

die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 2
}

root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=""
prefix=""
dry_run=0

while [ "$#" -gt 0 ]; do
    case "$1" in
        --bin)
            [ "$#" -ge 2 ] || die "--bin needs a path"
            bin="$2"
            shift 2
            ;;
        --prefix)
            [ "$#" -ge 2 ] || die "--prefix needs a directory"
            prefix="$2"
            shift 2
            ;;
        --dry-run)
            dry_run=1
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            die "unknown argument \`$1\`; see --help"
            ;;
    esac
done

if [ -n "$prefix" ]; then
    # Absolute, without a trailing slash, so "$prefix/etc" is a plain path.
    case "$prefix" in
        /*) ;;
        *) prefix="$(pwd)/$prefix" ;;
    esac
    prefix="${prefix%/}"
fi

bin_dir="$prefix/usr/local/bin"
unit_dir="$prefix/etc/systemd/system"
etc_dir="$prefix/etc/orch"
state_dir="$prefix/var/lib/orch"
config="$etc_dir/orch.yaml"
secrets="$etc_dir/secrets.env"
units=(orch-tick.service orch-tick.timer orch-serve.service)

# Print a command, then run it unless this is a dry run.
run() {
    printf '+ %s\n' "$*"
    if [ "$dry_run" -eq 0 ]; then
        "$@"
    fi
}

say() {
    printf '%s\n' "$*"
}

if [ -z "$prefix" ] && [ "$dry_run" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
    die "installing into / needs root; run it with sudo, or use --prefix DIR to stage elsewhere"
fi

for unit in "${units[@]}"; do
    [ -f "$root_dir/systemd/$unit" ] || die "missing unit file \`$root_dir/systemd/$unit\`"
done

# 1. The binary.
if [ -z "$bin" ]; then
    run cargo build --release --locked --manifest-path "$root_dir/Cargo.toml"
    bin="${CARGO_TARGET_DIR:-$root_dir/target}/release/orch"
fi
if [ "$dry_run" -eq 0 ] && [ ! -x "$bin" ]; then
    die "\`$bin\` is not an executable file"
fi
run install -d -m 0755 "$bin_dir"
# Copy next to the target and rename over it, so a tick starting meanwhile runs either the old
# binary or the new one, never a half-written file.
run install -m 0755 "$bin" "$bin_dir/.orch.new"
run mv -f "$bin_dir/.orch.new" "$bin_dir/orch"

# 2. The units (ours: replaced on every install; local changes belong in drop-ins made with
#    `systemctl edit`).
run install -d -m 0755 "$unit_dir"
for unit in "${units[@]}"; do
    run install -m 0644 "$root_dir/systemd/$unit" "$unit_dir/$unit"
done

# 3. The service user, its home being the state directory (agent toolchains keep their caches
#    there). systemd's StateDirectory= also creates it on first start.
if [ -z "$prefix" ]; then
    if id -u orch >/dev/null 2>&1; then
        say "user orch exists"
    else
        nologin="$(command -v nologin || true)"
        run useradd --system --user-group --home-dir /var/lib/orch \
            --shell "${nologin:-/usr/sbin/nologin}" orch
    fi
    run install -d -m 0750 -o orch -g orch "$state_dir"
else
    say "staging root: no user created"
    run install -d -m 0750 "$state_dir"
fi

# 4. The config, from `orch init`, only when there is none.
run install -d -m 0755 "$etc_dir"
if [ -e "$config" ]; then
    say "keeping existing $config"
elif [ "$dry_run" -eq 1 ]; then
    say "would write $config from \`orch init\` (state_dir /var/lib/orch)"
else
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    env -u ORCH_CONFIG -u ORCH_STATE_DIR -u ORCH_REPOS_DIR \
        "$bin" init --dir "$scratch" --state-dir "$scratch/state" >/dev/null
    # `orch init` keeps a fresh config self-contained (state next to it); an installed one keeps
    # its state where the units expect it.
    sed -e 's#^state_dir: state$#state_dir: /var/lib/orch#' \
        -e 's#^repos_dir: state/repos$#repos_dir: /var/lib/orch/repos#' \
        "$scratch/orch.yaml" >"$scratch/orch.installed.yaml"
    grep -q '^state_dir: /var/lib/orch$' "$scratch/orch.installed.yaml" ||
        die "the config from \`orch init\` has no \`state_dir: state\` line to point at /var/lib/orch"
    install -m 0644 "$scratch/orch.installed.yaml" "$config"
    say "wrote $config"
fi

# 5. The secrets file: read by systemd as root before it drops to the orch user, so root only.
if [ -e "$secrets" ]; then
    say "keeping existing $secrets"
elif [ "$dry_run" -eq 1 ]; then
    say "would write $secrets (mode 0600)"
else
    (
        umask 077
        cat >"$secrets" <<'EOF'
# Secrets for the orch units (EnvironmentFile=). Mode 0600, owned by root. One NAME=value per
# line; the names are the *_env keys of /etc/orch/orch.yaml, for example:
# ORCH_PLANE_TOKEN=
# ORCH_PLANE_WEBHOOK_SECRET=
# ORCH_GITEA_TOKEN=
# ORCH_GITEA_WEBHOOK_SECRET=
# ORCH_TELEGRAM_TOKEN=
EOF
    )
    chmod 0600 "$secrets"
    say "wrote $secrets"
fi

# 6. The credentials the units load (LoadCredential=): one file per secret, root only, created
# empty (an empty credential counts as not set). Existing files are never touched.
creds_dir="$etc_dir/credentials"
for name in ORCH_PLANE_TOKEN ORCH_GITEA_TOKEN ORCH_TELEGRAM_TOKEN ORCH_PLANE_WEBHOOK_SECRET \
    ORCH_GITEA_WEBHOOK_SECRET; do
    f="$creds_dir/$name"
    if [ -e "$f" ]; then
        say "keeping existing $f"
    elif [ "$dry_run" -eq 1 ]; then
        say "would create $f (empty, mode 0600)"
    else
        install -d -m 0700 "$creds_dir"
        ( umask 077 && : >"$f" )
        chmod 0600 "$f"
        say "created $f (empty)"
    fi
done

say ""
say "installed orch into ${prefix:-/}. Next:"
say "  put each token and webhook secret in its file under $creds_dir (or in $secrets),"
say "  edit $config (repos, agent), then check with: orch doctor"
say "  systemctl daemon-reload && systemctl enable --now orch-tick.timer"
say "  (orch-serve.service is for webhooks; it needs \`orch serve\`, which is planned)"
