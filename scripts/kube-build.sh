#!/usr/bin/env bash
# Builds the binaries of the single-node Kubernetes cluster the kubernetes
# sandbox is tested against (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl for the manifests' tests, and the pods'
# pause program) from the published
# Go modules pinned in tools/kube/go.mod, into a cache keyed by their
# versions:
#
#   ~/.cache/agentd/kube-<kubernetes version>-etcd<etcd version>/bin
#
# (AGENTD_KUBE_CACHE overrides ~/.cache/agentd). A cache that holds every
# binary is used as it is: the build runs once per machine and version.
# Prints the bin folder on its last line. No binary is ever committed.
#
#   scripts/kube-build.sh [--rebuild]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/tools/kube
rebuild=0
[[ ${1:-} == --rebuild ]] && rebuild=1

version() { awk -v m="$1" '$1 == m { print $2; exit }' "$mod/go.mod"; }
kver=$(version k8s.io/kubernetes)
ever=$(version go.etcd.io/etcd/server/v3)
[[ -n $kver && -n $ever ]] || { echo "kube-build: versions not found in $mod/go.mod" >&2; exit 1; }
cache=${AGENTD_KUBE_CACHE:-$HOME/.cache/agentd}/kube-$kver-etcd$ever
bin=$cache/bin
names=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause)

complete=1
for n in "${names[@]}"; do [[ -x $bin/$n ]] || complete=0; done
if [[ $complete == 1 && $rebuild == 0 ]]; then
	echo "kube-build: cached in $bin" >&2
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"
minor=${kver#v1.}; minor=${minor%%.*}
# Without these the node and the API server report v0.0.0-master.
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$kver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
cd "$mod"
t0=$SECONDS
for n in "${names[@]}"; do
	[[ -x $bin/$n && $rebuild == 0 ]] && continue
	pkg=k8s.io/kubernetes/cmd/$n
	[[ $n == etcd ]] && pkg=go.etcd.io/etcd/server/v3
	[[ $n == pause ]] && pkg=./pause
	t=$SECONDS
	# One after the other: each takes both cores; in parallel they only
	# compete for memory.
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="$ldflags" -o "$bin/$n.tmp" "$pkg"
	mv "$bin/$n.tmp" "$bin/$n"
	echo "kube-build: $n in $((SECONDS - t)) s" >&2
done
echo "kube-build: built in $((SECONDS - t0)) s into $bin" >&2
echo "$bin"
