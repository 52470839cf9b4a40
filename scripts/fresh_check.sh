#!/usr/bin/env bash
# Fresh-machine check (docs/deploy.md, "Proving a fresh machine"): prove the README's install
# steps where nothing was installed by hand. Debootstraps a bare Debian 12 root, runs it as a
# privileged podman container (its own network namespace), copies a clean `git archive` of HEAD
# into it, and inside runs exactly the README's `make demo` (scripts/setup.sh + scripts/demo.sh:
# apt packages, venv, Kubernetes binaries, Redis, a worker, the reference agents and a real
# evaluation round), waits for the round to finish, reads the board over HTTP from the site the
# demo serves on :8000, then runs the deploy check's tool step (deploy_check.sh --tools-only).
# Reports what had to be installed (dpkg diff, pip packages, Go toolchain and modules) and exits
# 0 only if every step passed. Run as root on Debian 12.
#
# Env: FRESH_WORK        work dir: the cached debootstrap tarball, the container's root, logs
#                        (default /var/cache/netarena/fresh)
#      FRESH_VARIANT     debootstrap variant, minbase (default) or default
#      FRESH_REBOOTSTRAP=1  debootstrap anew instead of reusing the cached pristine tarball
#      FRESH_K8S_CACHE   a /var/cache/netarena-like dir whose k8s/ holds prebuilt Kubernetes
#                        binaries (and kubectl); bind-mounted read-only, so the cold build from
#                        source is skipped (reported). Default: unset = build cold (long).
#      FRESH_APT_CACHE   a dir bind-mounted as the container's apt archive cache (downloaded
#                        .debs reused between runs; reported). Default: unset = download all.
#      FRESH_DEMO_APPS, FRESH_DEMO_QUERIES  passed as NETARENA_DEMO_APPS/_QUERIES (default: the
#                        demo's own defaults, every app and 12 queries)
#      FRESH_DEMO_TIMEOUT  seconds to wait for the demo's round (default 14400)
#      FRESH_KEEP=1      keep the container's root after the run (default: removed)
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${FRESH_WORK:-/var/cache/netarena/fresh}
VARIANT=${FRESH_VARIANT:-minbase}
ROOT=$WORK/root
TARBALL=$WORK/bookworm-$VARIANT.tar
MIRROR=http://deb.debian.org/debian
NAME=netarena-fresh-check
mkdir -p "$WORK"
log() { echo "fresh_check: $*"; }
fail() { echo "fresh_check: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "run as root"
case "$VARIANT" in minbase | default) ;; *) fail "FRESH_VARIANT must be minbase or default" ;; esac

# --- host tools: the deploy check's own tool step (podman, runc, CNI, debootstrap) ---------------
log "host tools: scripts/deploy_check.sh --tools-only"
scripts/deploy_check.sh --tools-only
export CONTAINERS_CONF=${NETARENA_DEPLOY_CACHE:-/var/cache/netarena/deploy}/containers.conf

# --- a pristine Debian 12 root -------------------------------------------------------------------
if [ "${FRESH_REBOOTSTRAP:-0}" = 1 ] || [ ! -f "$TARBALL" ]; then
  log "debootstrap --variant=$VARIANT bookworm ($MIRROR)"
  rm -rf "$WORK/bootstrap"
  debootstrap_args=(bookworm "$WORK/bootstrap" "$MIRROR")
  [ "$VARIANT" = default ] || debootstrap_args=(--variant="$VARIANT" "${debootstrap_args[@]}")
  debootstrap "${debootstrap_args[@]}" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
  # A standard installation's sources: the release, its updates and the security archive.
  cat > "$WORK/bootstrap/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$WORK"/bootstrap/var/cache/apt/archives/*.deb "$WORK"/bootstrap/var/lib/apt/lists/*
  tar -C "$WORK/bootstrap" -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
  rm -rf "$WORK/bootstrap"
else
  log "debootstrap: reusing the pristine $VARIANT root of $(date -u -r "$TARBALL" +%F) ($TARBALL; FRESH_REBOOTSTRAP=1 redoes it)"
fi
rm -rf "$ROOT" && mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$TARBALL"

# --- the repository: a clean archive of HEAD, copied in ------------------------------------------
commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain)" ] || log "note: the work tree has uncommitted changes; they are NOT part of the check (HEAD only)"
mkdir -p "$ROOT/root/netarena" "$ROOT/fresh"
git archive --format=tar HEAD | tar -x -C "$ROOT/root/netarena"
log "copied git archive of HEAD $commit into the container's /root/netarena"

# This network's HTTPS egress passes an intercepting proxy: its CA certificates are part of
# the network, not of the install steps (as the Dockerfile's extra-ca context). ca-certificates
# (installed by setup.sh) adds them to the system bundle; pip is told to use that bundle.
RUN_ENV=()
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  RUN_ENV+=(-e PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
  log "network: copied this network's extra CA certificates ($(cd /usr/local/share/ca-certificates && echo ./*.crt)) and set PIP_CERT"
fi
[ -z "${FRESH_DEMO_APPS:-}" ] || RUN_ENV+=(-e "NETARENA_DEMO_APPS=$FRESH_DEMO_APPS")
[ -z "${FRESH_DEMO_QUERIES:-}" ] || RUN_ENV+=(-e "NETARENA_DEMO_QUERIES=$FRESH_DEMO_QUERIES")
# Unbuffered: the round's progress reaches the log as it would reach a terminal.
RUN_ENV+=(-e "FRESH_DEMO_TIMEOUT=${FRESH_DEMO_TIMEOUT:-14400}" -e "FRESH_COMMIT=$commit" -e PYTHONUNBUFFERED=1)

MOUNTS=()
if [ -n "${FRESH_K8S_CACHE:-}" ]; then
  [ -d "$FRESH_K8S_CACHE/k8s" ] || fail "FRESH_K8S_CACHE=$FRESH_K8S_CACHE has no k8s/ directory"
  MOUNTS+=(-v "$FRESH_K8S_CACHE/k8s:/var/cache/netarena/k8s:ro")
  RUN_ENV+=(-e FRESH_K8S_FROM_CACHE="$FRESH_K8S_CACHE/k8s")
  log "k8s: Kubernetes binaries from $FRESH_K8S_CACHE/k8s (read-only): the cold build is SKIPPED"
else
  log "k8s: no FRESH_K8S_CACHE: the Kubernetes binaries are built cold inside (long on 2 cores)"
fi
if [ -n "${FRESH_APT_CACHE:-}" ]; then
  mkdir -p "$FRESH_APT_CACHE/partial"
  MOUNTS+=(-v "$FRESH_APT_CACHE:/var/cache/apt/archives")
  RUN_ENV+=(-e FRESH_APT_FROM_CACHE="$FRESH_APT_CACHE")
  log "apt: .deb files cached in $FRESH_APT_CACHE are reused (FRESH_APT_CACHE)"
fi
[ ! -d /lib/modules ] || MOUNTS+=(-v /lib/modules:/lib/modules:ro)
# The host's cgroup hierarchy (with --cgroupns=host): the MALT sandbox caps agent code with a
# memory and pids group under its own cgroup, the path /proc/self/cgroup names. podman's own
# /sys/fs/cgroup shows only the container's subtree at the root, so that path would not exist
# there and the worker refuses to start ("no memory limit can be enforced for agent code").
MOUNTS+=(-v /sys/fs/cgroup:/sys/fs/cgroup)

cp scripts/fresh_check_inside.sh "$ROOT/fresh/inside.sh"
podman rm -f "$NAME" >/dev/null 2>&1 || true
log "podman run --privileged --rootfs $ROOT (network namespace of its own, host cgroups)"
status=0
# The host's open-file limit (containers.conf's 1024 is low for Celery, etcd and the apiserver).
# runc refuses to start when one limit is overridden alone, or nproc above 32768 ("error setting
# rlimit ... operation not permitted" on this host), so both are given.
podman run --rm --name "$NAME" --privileged --cgroupns=host --hostname fresh \
  --ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=32768:32768 \
  "${MOUNTS[@]}" "${RUN_ENV[@]}" --rootfs "$ROOT" /bin/bash /fresh/inside.sh \
  2>&1 | tee "$WORK/fresh_check.log" || status=$?
rm -rf "$WORK/last-run"; cp -r "$ROOT/fresh" "$WORK/last-run" 2>/dev/null || true
[ "${FRESH_KEEP:-0}" = 1 ] || rm -rf "$ROOT"
if [ "$status" -ne 0 ]; then fail "a step failed inside the container (log: $WORK/fresh_check.log)"; fi
log "OK"
