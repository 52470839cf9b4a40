#!/usr/bin/env bash
# The inside of scripts/fresh_check.sh: runs in the fresh Debian 12 container as /fresh/inside.sh,
# with the repository at /root/netarena. Not meant to be run on a real machine.
set -uo pipefail
R=/fresh
REPO=/root/netarena
cd "$REPO" || exit 1
RESULTS=()
FAILED=0
say() { echo "fresh_check[inside]: $*"; }
step() {  # step NAME COMMAND...: run, record PASS/FAIL and the seconds it took
  local name=$1 t0=$SECONDS rc=0; shift
  say "== $name"
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then RESULTS+=("PASS  $name ($((SECONDS - t0)) s)")
  else RESULTS+=("FAIL  $name ($((SECONDS - t0)) s, exit $rc)"); FAILED=1; fi
  return "$rc"
}
packages() { dpkg-query -W -f='${Package} ${Version}\n' | sort > "$R/dpkg-$1.txt"; }
new_packages() {  # new_packages BEFORE AFTER: packages in AFTER and not in BEFORE (name version)
  join -v2 <(cut -d' ' -f1 "$R/dpkg-$1.txt") <(sort "$R/dpkg-$2.txt") | sort
}

say "commit ${FRESH_COMMIT:-?}; $(grep -oP '^PRETTY_NAME="\K[^"]*' /etc/os-release); kernel $(uname -r)"
packages 0-fresh
say "fresh root: $(wc -l < "$R/dpkg-0-fresh.txt") packages; python3: $(command -v python3 || echo none); make: $(command -v make || echo none); go: $(command -v go || echo none); kubectl: $(command -v kubectl || echo none)"

# --- the README's prerequisite: `make` itself (not part of a bare Debian 12) ----------------------
install_make() {
  command -v make >/dev/null && return 0
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make >/dev/null
}
step "README prerequisite: apt-get install make" install_make
packages 1-make

# --- make demo ------------------------------------------------------------------------------------
DONE_LINE="demo: the leaderboard is at"
demo() {
  local deadline=$((SECONDS + ${FRESH_DEMO_TIMEOUT:-14400}))
  setsid make demo >"$R/demo.log" 2>&1 &
  DEMO_PID=$!
  tail -n +1 -F "$R/demo.log" --pid="$DEMO_PID" 2>/dev/null &
  local tail_pid=$!
  until grep -q "$DONE_LINE" "$R/demo.log"; do
    if ! kill -0 "$DEMO_PID" 2>/dev/null; then
      wait "$DEMO_PID"; local rc=$?
      kill "$tail_pid" 2>/dev/null; say "make demo exited ($rc) before the round finished"; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      kill "$tail_pid" 2>/dev/null; say "the round did not finish within ${FRESH_DEMO_TIMEOUT:-14400} s"; return 1
    fi
    sleep 5
  done
  sleep 2; kill "$tail_pid" 2>/dev/null
  say "the demo reports the round finished ('$DONE_LINE')"
  if grep -q ": FAILED: " "$R/demo.log"; then
    say "a submission of the round failed:"; grep ": FAILED: " "$R/demo.log"; return 1
  fi
}
serves() {  # the site the demo left on :8000 answers, and its board ranks the round
  local deadline=$((SECONDS + 120)) code
  until code=$(curl -s -o "$R/index.html" -w '%{http_code}' http://127.0.0.1:8000/) && [ "$code" = 200 ]; do
    [ $SECONDS -lt $deadline ] || { say "GET / answered ${code:-nothing} for 2 minutes"; return 1; }
    sleep 2
  done
  say "GET http://127.0.0.1:8000/ -> 200 ($(wc -c < "$R/index.html") bytes)"
  curl -fsS http://127.0.0.1:8000/api/v1/leaderboard/ > "$R/board.json" || { say "GET /api/v1/leaderboard/ failed"; return 1; }
  local apps
  apps=$(grep -o "started .* on \[.*\]" "$R/demo.log" | sed "s/.* on \[//; s/\]//; s/[' ]//g")
  .venv/bin/python - "$R/board.json" "$apps" <<'EOF'
import json, sys
board = json.load(open(sys.argv[1]))["apps"]
apps = [a for a in sys.argv[2].split(",") if a]
if not apps:
    sys.exit("fresh_check[inside]: cannot tell the round's apps from the demo's output")
bad = []
for app in apps:
    rows = board.get(app) or []
    print(f"fresh_check[inside]: board {app}: " + (", ".join(
        f"#{r['rank']} {r['agent']} correct and safe {r['correct_and_safe']['value']:.0%}"
        for r in rows) or "no standings"))
    oracle = [r for r in rows if r["agent"] == "reference-oracle"]
    if not oracle or oracle[0]["rank"] != 1 or oracle[0]["correct_and_safe"]["value"] != 1.0:
        bad.append(app)
if bad:
    sys.exit(f"fresh_check[inside]: the oracle is not first with 100% correct and safe on {', '.join(bad)}")
EOF
}
stop_demo() { [ -n "${DEMO_PID:-}" ] && kill -- "-$DEMO_PID" 2>/dev/null; sleep 3; return 0; }
if step "make demo (round finished)" demo; then
  step "site serves the board over HTTP (:8000)" serves
fi
stop_demo
packages 2-demo

# --- the deploy check's tool step -------------------------------------------------------------------
step "deploy check tools (scripts/deploy_check.sh --tools-only)" scripts/deploy_check.sh --tools-only
packages 3-tools

# --- what it had to install -----------------------------------------------------------------------
installed() {  # installed BEFORE AFTER WHAT: the apt packages WHAT added
  new_packages "$1" "$2" > "$R/new-$2.txt"
  echo "-- apt: $(wc -l < "$R/new-$2.txt") packages installed by $3:"
  tr '\n' ' ' < "$R/new-$2.txt" | fold -s -w 100 | sed 's/^/   /'; echo
}
report() {
  echo
  say "what a fresh Debian 12 needed"
  installed 0-fresh 1-make "the README prerequisite (make)"
  installed 1-make 2-demo "make demo"
  installed 2-demo 3-tools "deploy_check.sh --tools-only"
  if [ -x .venv/bin/pip ]; then
    .venv/bin/pip list --format=freeze 2>/dev/null > "$R/pip-venv.txt"
    echo "-- pip: $(wc -l < "$R/pip-venv.txt") packages in $REPO/.venv (PyPI):"
    tr '\n' ' ' < "$R/pip-venv.txt" | fold -s -w 100 | sed 's/^/   /'; echo
  fi
  if [ -x /var/cache/netarena/deploy/venv/bin/pip ]; then
    echo "-- pip: deploy tools venv: $(/var/cache/netarena/deploy/venv/bin/pip list --format=freeze 2>/dev/null | tr '\n' ' ')"
  fi
  echo "-- Kubernetes binaries ($(ls -d /var/cache/netarena/k8s/*/bin 2>/dev/null)):"
  if [ -n "${FRESH_K8S_FROM_CACHE:-}" ]; then
    echo "   SKIPPED the build: read-only bind mount of the host's $FRESH_K8S_FROM_CACHE (FRESH_K8S_CACHE)"
  fi
  find /var/cache/netarena/k8s/ -path '*/bin/*' -printf '   %p %s bytes\n' 2>/dev/null
  echo "-- Go: toolchain $(ls -d /var/cache/netarena/go/toolchain/* 2>/dev/null || echo 'none fetched'); modules $(du -sh /var/cache/netarena/go/mod 2>/dev/null | cut -f1 || echo -) ($(find /var/cache/netarena/go/mod/cache/download -name '*.zip' 2>/dev/null | wc -l) module zips); build cache $(du -sh /var/cache/netarena/go/build 2>/dev/null | cut -f1 || echo -)"
  echo "-- kubectl: on PATH: $(command -v kubectl || echo 'none, so the demo set NETARENA_KUBECTL to the binary cache'\''s')"
  echo "-- other downloads: /root/.cache $(du -sh /root/.cache 2>/dev/null | cut -f1 || echo none); apt archives $(du -sh /var/cache/apt/archives 2>/dev/null | cut -f1)${FRESH_APT_FROM_CACHE:+ (reused from FRESH_APT_CACHE=$FRESH_APT_FROM_CACHE)}"
  echo
  say "steps"
  printf '   %s\n' "${RESULTS[@]}"
}
report
if [ "$FAILED" -ne 0 ]; then say "FAILED"; exit 1; fi
say "every step passed"
