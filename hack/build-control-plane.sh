#!/usr/bin/env bash
# Build, from the Go module proxy, every binary the local cluster needs (the control plane, the
# real node's kubelet and kube-proxy, CoreDNS, crictl, kubectl, helm, kwok), and actionlint (the release
# workflow's linter, tests/unit/release), and cache them outside git. Rebuilds only when a pinned version below
# changes (a stamp file records them; actionlint has a stamp of its own, so bumping either never rebuilds the other).
#
#   MCPG_CACHE   cache root (default ~/.cache/mcpg); binaries land in $MCPG_CACHE/bin
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a
# local path and requires them at v0.0.0. A wrapper module that replaces each staging module with
# its published v0.<minor>.<patch> builds it.
set -euo pipefail

K8S_VERSION=1.34.2
ETCD_VERSION=3.6.16
KWOK_VERSION=0.8.0
HELM_VERSION=3.22.0
COREDNS_VERSION=1.14.7
CRICTL_VERSION=1.34.0
ACTIONLINT_VERSION=1.7.12

CACHE="${MCPG_CACHE:-$HOME/.cache/mcpg}"
BIN="$CACHE/bin"
WORK="$CACHE/build"
STAMP="$BIN/.versions"
WANT="k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION helm=$HELM_VERSION coredns=$COREDNS_VERSION crictl=$CRICTL_VERSION"
TOOLS="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kwok helm coredns crictl"

ensure_actionlint() {
  # A minute's build, apart from the control plane's half hour: its own stamp, checked before the one below.
  local stamp="$BIN/.actionlint-version"
  if [[ -x "$BIN/actionlint" && -f "$stamp" && "$(cat "$stamp")" == "$ACTIONLINT_VERSION" ]]; then return 0; fi
  command -v go >/dev/null || { echo "error: go is required to build actionlint" >&2; exit 1; }
  mkdir -p "$BIN"
  echo "building actionlint $ACTIONLINT_VERSION into $BIN"
  GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$BIN" \
    go install -trimpath -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@v$ACTIONLINT_VERSION"
  echo "$ACTIONLINT_VERSION" >"$stamp"
}
ensure_actionlint

all_present() {
  for t in $TOOLS; do [[ -x "$BIN/$t" ]] || return 1; done
  [[ -f "$BIN/kwok-stages.yaml" ]]
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && all_present; then
  echo "control plane binaries up to date in $BIN ($WANT)"
  exit 0
fi

command -v go >/dev/null || { echo "error: go is required to build the control plane" >&2; exit 1; }
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
mkdir -p "$BIN" "$WORK"
start=$(date +%s)

STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"

build_kubernetes() {
  local dir="$WORK/k8s-$K8S_VERSION" minor="${K8S_VERSION#1.}"
  minor="${minor%%.*}"
  mkdir -p "$dir"
  {
    printf 'module example.local/k8sbins\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    for m in $STAGING; do printf '\tk8s.io/%s => k8s.io/%s v0.%s\n' "$m" "$m" "${K8S_VERSION#1.}"; done
    printf ')\n'
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  local ldf="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
  ldf+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ldf+=" -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  ldf+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ldf" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
}

build_coredns() {
  # Only the plugins the cluster's Corefile uses: a full build also compiles three cloud SDKs.
  # The directive order is CoreDNS's own (core/dnsserver/zdirectives.go), restricted to them.
  local dir="$WORK/coredns-$COREDNS_VERSION"
  mkdir -p "$dir"
  printf 'module example.local/corednsbin\n\ngo 1.26.0\n' >"$dir/go.mod"
  cat >"$dir/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
  (cd "$dir" && go get "github.com/coredns/coredns@v$COREDNS_VERSION" && go mod tidy \
    && go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" .)
}

build_etcd() {
  # etcd's own server/main.go is a one-line call into etcdmain; the wrapper does the same.
  local dir="$WORK/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  printf 'module example.local/etcdbin\n\ngo 1.26.0\n' >"$dir/go.mod"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"$dir/main.go"
  (cd "$dir" && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" && go mod tidy \
    && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)
}

build_installable() {
  # kwok and helm have no replace directives, so `go install` builds them straight from the proxy.
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "$1"
}

export_kwok_stages() {
  # kwok run on its own loads its stages only from --config (kwokctl writes these defaults for it):
  # without them it exits with "no stages found". Take them from the module the binary came from.
  local dir f
  dir="$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    printf -- '---\n'
    cat "$dir/kustomize/stage/$f.yaml"
  done >"$BIN/kwok-stages.yaml"
}

echo "building control plane binaries into $BIN ($WANT); the first build takes a while"
build_etcd
build_installable "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
export_kwok_stages
build_installable "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
build_installable "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION"
build_coredns
build_kubernetes
all_present || { echo "error: a control plane binary is missing after the build" >&2; exit 1; }
echo "$WANT" >"$STAMP"
echo "built in $(( $(date +%s) - start ))s"
