#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the kubernetes sandbox's tests,
# inside a network namespace of its own: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and a kubelet (built from the Go
# modules by scripts/kube-build.sh, cached), a private containerd (its own
# socket, root and state: not dockerd's), Debian's runc and CNI plugins
# (a bridge inside the namespace). Nothing listens or sends outside the
# namespace: its only interfaces besides loopback are a veth pair whose
# ends are both inside it.
#
#   scripts/kube.sh start DIR   # prints the variables the tests read (eval it)
#   scripts/kube.sh stop DIR    # deletes the pods, stops everything, removes DIR
#   scripts/kube.sh exec DIR CMD…   # runs CMD in the cluster's namespace
#
# The variables: AGENTD_KUBECONFIG (an admin kubeconfig), AGENTD_KUBE_NETNS
# (run the tests with `nsenter --net=/run/netns/$AGENTD_KUBE_NETNS …`: the
# API server is at an address of the namespace), AGENTD_KUBE_CONTAINERD (the runtime's
# socket, where tests import their image with ctr).
#
# One cluster per machine at a time: fixed ports inside the namespace and
# the shared /kubepods cgroups. Needs root, containerd, runc,
# containernetworking-plugins, openssl, iproute2, curl.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || { sed -n '2,22p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
netns=${AGENTD_KUBE_NETNS:-agentd-kube}
node_ip=10.77.0.1 # on an interface inside the namespace
pod_cidr=10.78.0.0/24
svc_cidr=10.79.0.0/24
node=agentd-node

log() { printf '\033[1m[kube]\033[0m %s\n' "$*" >&2; }
# Only the network namespace: `ip netns exec` would also remount /sys,
# hiding the cgroup mounts from the kubelet.
in_ns() { nsenter --net="/run/netns/$netns" "$@"; }

# daemon NAME CMD…: starts CMD in the namespace, in the background,
# logging to DIR/logs/NAME.log; its pid goes to DIR/pids/NAME. The
# subshell execs nsenter, which execs CMD: $! is CMD's pid.
daemon() {
  local name=$1
  shift
  (exec nsenter --net="/run/netns/$netns" "$@") >"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

# api PATH: GET from the API server as the admin.
api() {
  in_ns curl -sS --max-time 5 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://$node_ip:6443$1"
}

# wait_for WHAT SECONDS CMD…: retries CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2 t=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - t > secs)); then
      log "$what did not come up within ${secs}s; logs in $dir/logs"
      tail -n 30 "$dir"/logs/*.log >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

cert() { # cert NAME CN O [SAN]
  local name=$1 cn=$2 o=$3 san=${4:-}
  local ext=$dir/pki/$name.ext
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
  [[ -n $san ]] && echo "subjectAltName=$san" >>"$ext"
  local subj="/CN=$cn"
  [[ -n $o ]] && subj="/O=$o/CN=$cn"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/pki/$name.key" -subj "$subj" -out "$dir/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" -CAcreateserial \
    -days 30 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
}

kubeconfig() { # kubeconfig FILE NAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentd
  cluster:
    server: https://$node_ip:6443
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$2.crt
    client-key: $dir/pki/$2.key
contexts:
- name: agentd
  context: {cluster: agentd, user: $2}
current-context: agentd
EOF
}

# oci_single OUT REF FILE: an OCI image archive of one static binary at
# /FILE's base name, its entrypoint.
oci_single() {
  local out=$1 ref=$2 file=$3 work name
  work=$(mktemp -d)
  name=$(basename "$file")
  mkdir -p "$work/root" "$work/layout/blobs/sha256"
  cp "$file" "$work/root/$name"
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$work/root" -cf "$work/layer.tar" "$name"
  local ld ls cd cs md ms
  ld=$(sha256sum "$work/layer.tar" | cut -d' ' -f1); ls=$(stat -c %s "$work/layer.tar")
  mv "$work/layer.tar" "$work/layout/blobs/sha256/$ld"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/%s"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$name" "$ld" >"$work/c"
  cd=$(sha256sum "$work/c" | cut -d' ' -f1); cs=$(stat -c %s "$work/c"); mv "$work/c" "$work/layout/blobs/sha256/$cd"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" >"$work/m"
  md=$(sha256sum "$work/m" | cut -d' ' -f1); ms=$(stat -c %s "$work/m"); mv "$work/m" "$work/layout/blobs/sha256/$md"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"docker.io/library/%s","org.opencontainers.image.ref.name":"%s"}}]}' "$md" "$ms" "$ref" "$ref" >"$work/layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  tar -C "$work/layout" -cf "$out" oci-layout index.json blobs
  rm -rf "$work"
}

start() {
  local t0=$SECONDS
  [[ $(id -u) == 0 ]] || { log "needs root"; exit 1; }
  for c in containerd runc openssl curl ip nsenter; do
    command -v "$c" >/dev/null || { log "$c is not installed (scripts/setup.sh)"; exit 1; }
  done
  [[ -x /usr/lib/cni/bridge ]] || { log "containernetworking-plugins is not installed (scripts/setup.sh)"; exit 1; }
  if ip netns list | grep -qw "$netns"; then
    # A namespace nothing runs in is left over (a machine restored from a
    # snapshot, a killed run): take it over. One with processes is a live
    # cluster, which we must not disturb.
    if [[ -n $(ip netns pids "$netns" 2>/dev/null) ]]; then
      log "namespace $netns is in use: another cluster runs (scripts/kube.sh stop DIR, or set AGENTD_KUBE_NETNS)"
      exit 1
    fi
    log "namespace $netns is left over and empty: removing it"
    ip netns del "$netns" 2>/dev/null || rm -f "/run/netns/$netns"
  fi
  local bin
  bin=$("$root/scripts/kube-build.sh" | tail -n 1)
  log "binaries: $bin ($((SECONDS - t0))s)"
  local t1=$SECONDS
  rm -rf "$dir"
  mkdir -p "$dir"/{logs,pids,pki,etcd,cni,cni-ipam,containerd,kubelet}
  dir=$(cd "$dir" && pwd)
  echo "$bin" >"$dir/bin"

  # The namespace: loopback, and a veth pair whose ends are both inside:
  # one holds the node's address and the default route (so whatever is
  # sent elsewhere goes nowhere).
  ip netns add "$netns"
  in_ns ip link set lo up
  in_ns ip link add kube0 type veth peer name kube1 # both ends inside
  in_ns ip addr add "$node_ip/24" dev kube0
  in_ns ip link set kube1 up
  in_ns ip link set kube0 up
  in_ns ip route add default dev kube0

  # Certificates: one CA; the API server's serving certificate; one admin
  # identity (system:masters) for every component and the tests; the
  # service account signing key.
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$dir/pki/ca.key" -subj "/CN=agentd-test-ca" \
    -days 30 -out "$dir/pki/ca.crt" 2>/dev/null
  cert apiserver kube-apiserver "" "IP:$node_ip,IP:10.79.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
  cert admin admin system:masters
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  kubeconfig "$dir/admin.kubeconfig" admin

  # containerd: private socket, root and state; the settings this machine
  # needs (docs/kubernetes.md): no oom_score_adj, cgroupfs, a local pause
  # image.
  cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/agentd-pause:1"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
EOF
  cat >"$dir/cni/10-agentd.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "agentd", "plugins": [
  {"type": "bridge", "bridge": "agentd0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni-ipam"}}
]}
EOF
  daemon containerd containerd --config "$dir/containerd/config.toml"
  wait_for containerd 30 ctr -a "$dir/containerd/containerd.sock" version
  oci_single "$dir/pause.tar" agentd-pause:1 "$bin/pause"
  ctr -a "$dir/containerd/containerd.sock" -n k8s.io images import "$dir/pause.tar" >/dev/null
  rm -f "$dir/pause.tar"

  daemon etcd "$bin/etcd" --data-dir "$dir/etcd" --name agentd \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster agentd=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
  daemon kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$node_ip" --secure-port 6443 \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --kubelet-client-certificate "$dir/pki/admin.crt" --kubelet-client-key "$dir/pki/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" --service-cluster-ip-range "$svc_cidr" \
    --authorization-mode RBAC --anonymous-auth=false --profiling=false --v 0
  wait_for kube-apiserver 90 api /readyz

  daemon kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/admin.kubeconfig" \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --leader-elect=false --bind-address 127.0.0.1 --profiling=false --v 0
  daemon kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/admin.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --profiling=false --v 0

  cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
readOnlyPort: 0
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: ""
registerNode: true
maxPods: 110
EOF
  daemon kubelet "$bin/kubelet" --config "$dir/kubelet/config.yaml" --kubeconfig "$dir/admin.kubeconfig" \
    --hostname-override "$node" --node-ip "$node_ip" --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" --v 0
  wait_for "node Ready" 90 node_ready
  wait_for "the default service account" 60 api /api/v1/namespaces/default/serviceaccounts/default
  log "cluster up in $((SECONDS - t1))s (Kubernetes $(api /version | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p'))"
  echo "AGENTD_KUBECONFIG=$dir/admin.kubeconfig"
  echo "AGENTD_KUBE_NETNS=$netns"
  echo "AGENTD_KUBE_CONTAINERD=$dir/containerd/containerd.sock"
  echo "AGENTD_KUBELET_DIR=$dir/kubelet"
}

node_ready() {
  api "/api/v1/nodes/$node" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}

# pidof_daemon NAME: the pid recorded for NAME, if it still runs.
pidof_daemon() {
  local f=$dir/pids/$1 pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

stop_daemon() { # stop_daemon NAME: SIGTERM, then SIGKILL after 10 s
  local pid i
  pid=$(pidof_daemon "$1") || return 0
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

stop() {
  local t0=$SECONDS
  [[ -d $dir ]] || { log "$dir: no cluster"; return 0; }
  dir=$(cd "$dir" && pwd)
  local sock=$dir/containerd/containerd.sock
  if pidof_daemon kube-apiserver >/dev/null && pidof_daemon kubelet >/dev/null; then
    # Pods first, through the API, so the kubelet tears them down.
    local ns
    for ns in $(api /api/v1/pods | tr ',' '\n' | sed -n 's/.*"namespace": *"\([^"]*\)".*/\1/p' | sort -u); do
      in_ns curl -sS --max-time 10 -X DELETE --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
        "https://$node_ip:6443/api/v1/namespaces/$ns/pods?gracePeriodSeconds=0" >/dev/null || true
    done
    local i
    for ((i = 0; i < 100; i++)); do
      [[ -z $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_daemon kubelet
  # Whatever is left of the pods: their tasks, then their shims (started
  # by this containerd: their command line names its socket).
  if pidof_daemon containerd >/dev/null; then
    local task
    for task in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  fi
  for name in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
    stop_daemon "$name"
  done
  # What is left of this cluster: the shims this containerd started and any
  # process still naming DIR (a daemon whose pid file was lost), then what
  # still runs in the pods' control groups.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" || true) $(pgrep -f -- "--config $dir/|--data-dir $dir/|--kubeconfig $dir/" || true); do
    kill -9 "$pid" 2>/dev/null || true
  done
  for pid in $(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
    kill -9 "$pid" 2>/dev/null || true
  done
  # Mounts the kubelet and containerd made under DIR, deepest first.
  local m
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  # The pods' control groups (cgroup v1: one tree per controller).
  local c
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip netns del "$netns" 2>/dev/null || true
  # The pods' namespaces CNI left behind (named cni-…) once nothing runs in them.
  local n
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ { print $1 }'); do
    [[ -z $(ip netns pids "$n" 2>/dev/null) ]] && ip netns del "$n" 2>/dev/null || true
  done
  rm -rf "$dir"
  log "cluster stopped in $((SECONDS - t0))s"
}

case $cmd in
start) start ;;
stop) stop ;;
exec)
  shift 2
  in_ns "$@"
  ;;
*)
  echo "unknown command $cmd (start, stop, exec)" >&2
  exit 2
  ;;
esac
