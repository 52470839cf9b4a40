#!/usr/bin/env bash
# Provide the pinned binaries of the embedded Kubernetes cluster (docs/k8s-cluster.md):
#   kube-apiserver, kube-controller-manager  (k8s.io/kubernetes $K8S_VERSION)
#   etcd                                      (go.etcd.io/etcd/server/v3 $ETCD_VERSION)
#
# Order of preference for every binary:
#   1. already in the cache directory (NETARENA_K8S_BIN) with the pinned version -> kept;
#   2. already on PATH -> linked into the cache directory;
#   3. NETARENA_K8S_DOWNLOAD=1 -> official release binaries (dl.k8s.io, GitHub releases; needs
#      internet, checksums verified for the Kubernetes binaries);
#   4. otherwise built from source through the Go module proxy (the first entry of
#      `go env GOPROXY`, i.e. what go itself uses), with wrapper modules
#      generated from the exact upstream go.mod.
#
# Usage: scripts/build_k8s.sh [etcd] [kubernetes]   (default: both)
# NetworkPolicy enforcement is ours (apps/k8s/cluster/enforcer.py): nothing to build for it.
# Env:   NETARENA_K8S_BIN   cache dir (default /var/cache/netarena/k8s/$K8S_VERSION/bin)
#        NETARENA_GO_CACHE  Go module and build caches (default /var/cache/netarena/go)
#        NETARENA_K8S_DOWNLOAD=1  download official release binaries instead of building
#        GO                 go command (default: go on PATH, else /usr/local/go/bin/go, else the
#                           toolchain NETARENA_GO_VERSION (1.26.8) fetched from the module proxy)
#        GO_BUILD_P         parallelism of go build (default 2)
#        NETARENA_K8S_KUBECTL=1  build kubectl too (the k8s worker image has no other kubectl;
#                           a development machine uses the kubectl on its PATH)
#
# Version choice: the module proxy reachable from our machines does not serve every v1.32.x
# staging module (k8s.io/kube-controller-manager, kube-scheduler, csi-translation-lib, cri-client
# are missing at v0.32.x), so we pin v1.33.13, which kubectl v1.32 supports (version skew +-1).
# etcd v3.5.21 is the version
# k8s v1.33 itself is tested against (k8s.io/kubernetes go.mod).
set -euo pipefail

K8S_VERSION="${NETARENA_K8S_VERSION:-v1.33.13}"
ETCD_VERSION="v3.5.21"

BIN_DIR="${NETARENA_K8S_BIN:-/var/cache/netarena/k8s/${K8S_VERSION}/bin}"
GO_CACHE_ROOT="${NETARENA_GO_CACHE:-/var/cache/netarena/go}"
WORK_ROOT="${GO_CACHE_ROOT}/wrappers"
GO_BUILD_P="${GO_BUILD_P:-2}"

# Without a go (a fresh machine: Debian 12's golang is too old for Kubernetes anyway), the first
# build fetches the toolchain from the module proxy (module golang.org/toolchain, as the
# Dockerfile's k8s-binaries stage does) into $GO_CACHE_ROOT/toolchain; a cached run needs none.
GO_VERSION="${NETARENA_GO_VERSION:-1.26.8}"
if [[ -z "${GO:-}" ]]; then
    if command -v go >/dev/null 2>&1; then GO="$(command -v go)"
    elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
    else GO=""; fi
fi

export GOMODCACHE="${GO_CACHE_ROOT}/mod"
export GOCACHE="${GO_CACHE_ROOT}/build"
export GOTOOLCHAIN=local       # never fetch another toolchain behind the user's back
export CGO_ENABLED=0           # static binaries, no C toolchain needed
export GOFLAGS="-mod=mod -buildvcs=false"

# The module proxy is whatever the Go toolchain uses (`go env GOPROXY`: the GOPROXY environment
# variable, go's own env file or its built-in default); its first entry also serves the .mod and
# .info files read below with curl. Resolved lazily, so a cached run needs no go at all.
PROXY=""
ensure_go() {
    [[ -n "$GO" ]] && return 0
    local dir="$GO_CACHE_ROOT/toolchain/go$GO_VERSION" proxy="${GOPROXY:-https://proxy.golang.org}" tmp
    proxy="${proxy%%[,|]*}"
    if [[ ! -x "$dir/bin/go" ]]; then
        log "no go on PATH: fetching the Go $GO_VERSION toolchain from $proxy (golang.org/toolchain)"
        tmp="$(mktemp -d)"
        download "$proxy/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-amd64.zip" "$tmp/go.zip"
        python3 -m zipfile -e "$tmp/go.zip" "$tmp/x"
        rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
        mv "$tmp/x/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-amd64" "$dir"
        chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
        rm -rf "$tmp"
    fi
    GO="$dir/bin/go"
    log "go: $("$GO" version) ($dir)"
}
module_proxy() {
    [[ -n "$PROXY" ]] && return 0
    ensure_go
    local list
    list="$("$GO" env GOPROXY)" || { log "cannot run '$GO env GOPROXY'"; exit 1; }
    PROXY="${list%%[,|]*}"
    case "$PROXY" in
        "" | direct | off) log "GOPROXY='$list' names no module proxy; set GOPROXY"; exit 1 ;;
    esac
}

log() { printf '[build_k8s %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

mkdir -p "$BIN_DIR" "$GOMODCACHE" "$GOCACHE" "$WORK_ROOT"

# have_binary NAME EXPECTED_SUBSTRING VERSION_ARGS...
# Returns 0 if BIN_DIR/NAME exists (or is linked from PATH) and reports the expected version.
have_binary() {
    local name="$1" expected="$2"; shift 2
    local path="$BIN_DIR/$name" out
    if [[ -x "$path" ]] && out="$("$path" "$@" 2>&1)" && [[ "$out" == *"$expected"* ]]; then
        log "$name: cached at $path ($expected)"
        return 0
    fi
    local on_path
    if on_path="$(command -v "$name" 2>/dev/null)" && [[ "$on_path" != "$path" ]]; then
        if out="$("$on_path" "$@" 2>&1)" && [[ "$out" == *"$expected"* ]]; then
            ln -sf "$on_path" "$path"
            log "$name: using $on_path from PATH ($expected)"
            return 0
        fi
        log "$name: $on_path on PATH does not report $expected; ignoring it"
    fi
    return 1
}

release_time() {  # the upstream tag time from the proxy, used as a reproducible build date
    module_proxy
    curl -fsS "$PROXY/$1/@v/$2.info" | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p'
}

download() {  # download URL DEST
    curl -fsSL --retry 3 -o "$2.part" "$1" && mv "$2.part" "$2"
}

build_kubernetes() {
    local minor_full="${K8S_VERSION#v1.}" stage="v0.${K8S_VERSION#v1.}"
    local minor="${minor_full%%.*}"
    local targets=(kube-apiserver kube-controller-manager) t have=1
    if [[ "${NETARENA_K8S_KUBECTL:-0}" == 1 ]]; then targets+=(kubectl); fi
    for t in "${targets[@]}"; do
        if [[ "$t" == kubectl ]]; then
            have_binary kubectl "$K8S_VERSION" version --client || have=0
        else
            have_binary "$t" "$K8S_VERSION" --version || have=0
        fi
    done
    if [[ "$have" == 1 ]]; then return 0; fi
    if [[ "${NETARENA_K8S_DOWNLOAD:-0}" == 1 ]]; then
        local b base="https://dl.k8s.io/release/${K8S_VERSION}/bin/linux/amd64"
        for b in "${targets[@]}"; do
            log "downloading $base/$b"
            download "$base/$b" "$BIN_DIR/$b"
            download "$base/$b.sha256" "$BIN_DIR/$b.sha256"
            echo "$(cat "$BIN_DIR/$b.sha256")  $BIN_DIR/$b" | sha256sum -c -
            chmod +x "$BIN_DIR/$b"
        done
        return 0
    fi

    module_proxy
    local dir="$WORK_ROOT/kubernetes-$K8S_VERSION"
    rm -rf "$dir" && mkdir -p "$dir"
    log "fetching k8s.io/kubernetes@$K8S_VERSION go.mod from $PROXY"
    curl -fsS "$PROXY/k8s.io/kubernetes/@v/$K8S_VERSION.mod" >"$dir/upstream.mod"

    # The upstream go.mod replaces every staging module with ./staging/src/...; a dependant module
    # must replace each with its published twin v0.X.Y instead. The sample-* staging modules are
    # never imported by the binaries we build and are not all served by the proxy: local stubs.
    {
        echo "module netarena.local/k8s-build"
        echo
        grep -E '^go [0-9]' "$dir/upstream.mod"
        grep -E '^godebug ' "$dir/upstream.mod" || true
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        local mod
        for mod in $(sed -n '/^replace (/,/^)/p' "$dir/upstream.mod" | awk '/=>/ {print $1}'); do
            case "$mod" in
                k8s.io/sample-*)
                    mkdir -p "$dir/stub/${mod#k8s.io/}"
                    printf 'module %s\n\ngo 1.22\n' "$mod" >"$dir/stub/${mod#k8s.io/}/go.mod"
                    echo "	$mod => ./stub/${mod#k8s.io/}"
                    ;;
                *) echo "	$mod => $mod $stage" ;;
            esac
        done
        echo ")"
    } >"$dir/go.mod"

    local date pkg ldflags=""
    date="$(release_time k8s.io/kubernetes "$K8S_VERSION")"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    log "building ${targets[*]} $K8S_VERSION (go build -p $GO_BUILD_P)"
    (cd "$dir" && "$GO" build -p "$GO_BUILD_P" -trimpath -ldflags "-s -w$ldflags" -o "$BIN_DIR/" \
        "${targets[@]/#/k8s.io/kubernetes/cmd/}")
    cp "$dir/go.mod" "$BIN_DIR/kubernetes.go.mod"
    cp "$dir/go.sum" "$BIN_DIR/kubernetes.go.sum"
}

build_etcd() {
    if have_binary etcd "etcd Version: ${ETCD_VERSION#v}" --version; then return 0; fi
    if [[ "${NETARENA_K8S_DOWNLOAD:-0}" == 1 ]]; then
        local name="etcd-${ETCD_VERSION}-linux-amd64" tmp
        tmp="$(mktemp -d)"
        download "https://github.com/etcd-io/etcd/releases/download/${ETCD_VERSION}/$name.tar.gz" \
            "$tmp/etcd.tgz"
        tar -xzf "$tmp/etcd.tgz" -C "$tmp"
        install -m 0755 "$tmp/$name/etcd" "$BIN_DIR/etcd"
        rm -rf "$tmp"
        return 0
    fi
    module_proxy
    local dir="$WORK_ROOT/etcd-$ETCD_VERSION"
    rm -rf "$dir" && mkdir -p "$dir"
    {
        echo "module netarena.local/etcd-build"
        echo
        curl -fsS "$PROXY/go.etcd.io/etcd/server/v3/@v/$ETCD_VERSION.mod" | grep -E '^go [0-9]'
        echo
        echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    } >"$dir/go.mod"
    log "building etcd $ETCD_VERSION"
    (cd "$dir" && "$GO" build -p "$GO_BUILD_P" -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" \
        go.etcd.io/etcd/server/v3)
    cp "$dir/go.mod" "$BIN_DIR/etcd.go.mod"
    cp "$dir/go.sum" "$BIN_DIR/etcd.go.sum"
}

main() {
    local parts=("$@") part start=$SECONDS
    [[ ${#parts[@]} -eq 0 ]] && parts=(etcd kubernetes)
    log "go: ${GO:-none on PATH (fetched if a build needs it)}; bin dir: $BIN_DIR; caches: $GO_CACHE_ROOT"
    for part in "${parts[@]}"; do
        case "$part" in
            etcd) build_etcd ;;
            kubernetes) build_kubernetes ;;
            *) log "unknown component: $part"; exit 2 ;;
        esac
    done
    log "done in $((SECONDS - start)) s; binaries in $BIN_DIR:"
    ls -l "$BIN_DIR" >&2
}

main "$@"
