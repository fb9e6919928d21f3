# shellcheck shell=bash disable=SC2154
# The "full" level of up.sh: a node that runs pods. Sourced by up.sh after lib.sh; its
# functions run in up.sh's shell and use its helpers (cert, kubeconfig, free_port, start,
# wait_for) and variables (KT_RUN, pki, bin, api_url, SERVICE_CIDR). Every change made
# to the host outside $KT_RUN is recorded under $KT_RUN/full/host so that down.sh undoes
# exactly that (down.sh's full_teardown reads it).

KT_NODE_NAME=${KT_NODE_NAME:-kubetrain-e2e}
KT_CNI_BRIDGE=${KT_CNI_BRIDGE:-kt-cni0}
KT_POD_CIDR=${KT_POD_CIDR:-10.244.0.0/24}
# The node's address: the bridge's gateway address, the first of the pod range.
KT_NODE_IP=${KT_NODE_IP:-$(awk -F'[./]' '{printf "%d.%d.%d.%d", $1, $2, $3, $4 + 1}' <<<"$KT_POD_CIDR")}
KT_POD_PREFIX=${KT_POD_CIDR#*/}
KT_DNS_IP=${KT_DNS_IP:-10.96.0.10}
KT_CLUSTER_DOMAIN=${KT_CLUSTER_DOMAIN:-cluster.local}
KT_PV_COUNT=${KT_PV_COUNT:-24}
KT_PV_SIZE=${KT_PV_SIZE:-10Gi}
KT_CGROUP_ROOT=${KT_CGROUP_ROOT:-kubetrain-e2e}
KT_PAUSE_IMAGE=kubetrain/pause:3.10
KT_COREDNS_IMAGE=kubetrain/coredns:$COREDNS_VERSION
KT_CNI_BIN=${KT_CNI_BIN:-/usr/lib/cni}
full=$KT_RUN/full

# Kernel settings the kubelet and kube-proxy may change; down.sh puts back any that differ.
FULL_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal
  net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables"

# full_preflight: fails with the reason when something the full level needs is missing.
full_preflight() {
  local c p
  [ "$(id -u)" = 0 ] || kt_die "up.sh full must run as root (containerd, kubelet, bridges)"
  for c in containerd containerd-shim-runc-v2 runc ctr iptables iptables-save ip gcc; do
    command -v "$c" >/dev/null ||
      kt_die "$c not found (Debian packages: containerd runc iptables iproute2 gcc)"
  done
  for p in bridge host-local portmap firewall loopback; do
    [ -x "$KT_CNI_BIN/$p" ] ||
      kt_die "CNI plugin $KT_CNI_BIN/$p not found (Debian package containernetworking-plugins)"
  done
  [ -d /sys/fs/cgroup/memory ] && [ -d /sys/fs/cgroup/cpu ] ||
    kt_die "cgroup v1 memory and cpu controllers not mounted under /sys/fs/cgroup"
  if ip link show "$KT_CNI_BRIDGE" >/dev/null 2>&1; then
    kt_die "bridge $KT_CNI_BRIDGE exists: another full cluster runs (its down.sh removes it), or set KT_CNI_BRIDGE and KT_POD_CIDR"
  fi
  coredns_bin=$("$KT_CLUSTER/build-coredns.sh") || kt_die "CoreDNS unavailable"
}

full_certs() {
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/O=system:nodes/CN=system:node:$KT_NODE_NAME"
  cert kube-proxy "/CN=system:kube-proxy"
}

full_ports() {
  free_port sched_port
  free_port kubelet_port
  free_port kubelet_healthz_port
  free_port proxy_metrics_port
  free_port proxy_healthz_port
}

full_kubeconfigs() {
  kubeconfig "$KT_RUN/scheduler.kubeconfig" scheduler
  kubeconfig "$KT_RUN/kubelet.kubeconfig" kubelet
  kubeconfig "$KT_RUN/kube-proxy.kubeconfig" kube-proxy
}

full_env() {
  printf 'KT_NODE_NAME=%q\n' "$KT_NODE_NAME"
  printf 'KT_NODE_IP=%q\n' "$KT_NODE_IP"
  printf 'KT_POD_CIDR=%q\n' "$KT_POD_CIDR"
  printf 'KT_CNI_BRIDGE=%q\n' "$KT_CNI_BRIDGE"
  printf 'KT_DNS_IP=%q\n' "$KT_DNS_IP"
  printf 'KT_CLUSTER_DOMAIN=%q\n' "$KT_CLUSTER_DOMAIN"
  printf 'KT_CONTAINERD_ADDRESS=%q\n' "$full/containerd/containerd.sock"
  printf 'KT_KUBELET_PORT=%q\n' "$kubelet_port"
}

# full_chains: the CNI-, KUBE- and KT- chains of iptables and ip6tables, one
# "COMMAND TABLE CHAIN" a line (the kubelet makes KUBE- chains in both families).
full_chains() {
  local c t
  for c in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$c-save" -t "$t" 2>/dev/null | sed -n "s/^:\(\(CNI\|KUBE\|KT\)-[^ ]*\) .*/$c $t \1/p"
    done
  done
}

# full_host_setup: the host changes, each recorded under $full/host before it is made:
# the sysctls as they were, the CNI and KUBE chains that already existed, the bridge with
# the node address and a route for the Service range, a mangle chain that keeps pod
# traffic on the bridge, and the cgroup root of the kubelet's pods.
full_host_setup() {
  local d s v
  mkdir -p "$full"/{host,containerd,kubelet,kubelet-logs,cni/net.d,cni/ipam,volumes,images}
  for s in $FULL_SYSCTLS; do
    v=$(sysctl -n "$s" 2>/dev/null) && printf '%s=%s\n' "$s" "$v"
  done > "$full/host/sysctl"
  full_chains > "$full/host/chains-before"
  [ -d /var/log/containers ] || echo /var/log/containers > "$full/host/made-dirs"

  echo "$KT_CNI_BRIDGE" > "$full/host/bridge"
  ip link add "$KT_CNI_BRIDGE" type bridge
  ip addr add "$KT_NODE_IP/$KT_POD_PREFIX" dev "$KT_CNI_BRIDGE"
  ip link set "$KT_CNI_BRIDGE" up
  # Service addresses not handled by kube-proxy die on the bridge instead of leaving by
  # the default route.
  ip route add "$SERVICE_CIDR" dev "$KT_CNI_BRIDGE" src "$KT_NODE_IP"
  # Pods talk to each other, to the node and to Services, never past this host.
  echo "mangle KT-E2E-EGRESS" > "$full/host/chains"
  iptables -t mangle -N KT-E2E-EGRESS
  iptables -t mangle -A KT-E2E-EGRESS -s "$KT_POD_CIDR" ! -o "$KT_CNI_BRIDGE" -j DROP
  iptables -t mangle -I FORWARD -j KT-E2E-EGRESS

  echo "$KT_CGROUP_ROOT" > "$full/host/cgroup-root"
  for d in /sys/fs/cgroup/*/; do
    case $d in */unified/) continue ;; esac
    mkdir -p "$d$KT_CGROUP_ROOT"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$KT_CGROUP_ROOT/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$KT_CGROUP_ROOT/cpuset.mems"
}

# full_images: the pause image (docker/pause/pause.c, static) and the CoreDNS image, each
# a single-layer image made by docker/scratch-image.sh, imported into containerd.
full_images() {
  local img=$full/images
  gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Os -static -s \
    -o "$img/pause" "$KT_ROOT/docker/pause/pause.c"
  bash "$KT_ROOT/docker/scratch-image.sh" "$img/pause.tar" "$KT_PAUSE_IMAGE" "$img/pause=/pause"
  bash "$KT_ROOT/docker/scratch-image.sh" "$img/coredns.tar" "$KT_COREDNS_IMAGE" \
    "$coredns_bin=/coredns"
  "$KT_CLUSTER/load-image.sh" --tar "$img/pause.tar" --tar "$img/coredns.tar" >/dev/null
  rm -f "$img"/*.tar
}

full_containerd_config() {
  local c=$full/containerd
  cat > "$c/config.toml" <<EOF
# containerd for the e2e node (up.sh full): its own root, state and socket, so Docker's
# containerd is untouched; CRI with the pause image made here and the CNI bridge.
version = 2
root = "$c/root"
state = "$c/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$KT_PAUSE_IMAGE"
  # CAP_SYS_RESOURCE is not in this machine's bounding set: no container may ask for an
  # oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  tolerate_missing_hugetlb_controller = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$c/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$KT_CNI_BIN"
    conf_dir = "$full/cni/net.d"
    max_conf_num = 1
EOF
}

full_cni_config() {
  cat > "$full/cni/net.d/10-kubetrain.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kubetrain-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$KT_CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$full/cni/ipam",
        "ranges": [[{"subnet": "$KT_POD_CIDR", "gateway": "$KT_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF
}

full_kubelet_config() {
  : > "$full/kubelet/resolv.conf"
  cat > "$full/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $KT_NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$full/containerd/containerd.sock
# cgroups v1 on these machines, no systemd, no swap accounting.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$KT_CGROUP_ROOT
failSwapOn: false
# Negative oom_score_adj values are refused here (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
clusterDNS: [$KT_DNS_IP]
clusterDomain: $KT_CLUSTER_DOMAIN
resolvConf: $full/kubelet/resolv.conf
podLogsDir: $full/kubelet-logs
serializeImagePulls: false
# The node's images are imported, never pulled (there is no registry to pull them from
# again), so the kubelet must not collect them: 100 turns its image GC off. At 99 a full
# disk (the cold run of 2026-12-01, beside a warm cache) had it remove the pause image,
# and no pod could start after. Eviction only at 1 % left, for the same reason.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 110
EOF
}

full_storage_manifest() {
  local i
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: kubetrain-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
reclaimPolicy: Retain
volumeBindingMode: Immediate
EOF
  for i in $(seq 0 $((KT_PV_COUNT - 1))); do
    mkdir -p "$full/volumes/pv-$i"
    chmod 1777 "$full/volumes/pv-$i"
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: kt-pv-$i
  labels: {kubetrain.dev/e2e-volume: "true"}
spec:
  storageClassName: kubetrain-local
  capacity: {storage: $KT_PV_SIZE}
  accessModes: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $full/volumes/pv-$i, type: Directory}
EOF
  done
}

# full_start: scheduler, containerd, kube-proxy, kubelet; then CoreDNS and the volumes.
full_start() {
  local k=("$bin/kubectl" --kubeconfig "$KT_RUN/kubeconfig")
  kt_log "starting kube-scheduler (health on 127.0.0.1:$sched_port)"
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$KT_RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig "$KT_RUN/scheduler.kubeconfig" \
    --authorization-kubeconfig "$KT_RUN/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --cert-dir "$pki/scheduler" \
    "${gate_flags[@]}" \
    --leader-elect=false --profiling=false
  wait_for kube-scheduler curl -skf "https://127.0.0.1:$sched_port/healthz"

  full_cni_config
  full_containerd_config
  kt_log "starting containerd ($full/containerd/containerd.sock)"
  start containerd containerd --config "$full/containerd/config.toml" --log-level warn
  wait_for containerd ctr --address "$full/containerd/containerd.sock" version
  full_images

  kt_log "starting kube-proxy (iptables; health on 127.0.0.1:$proxy_healthz_port)"
  start kube-proxy "$bin/kube-proxy" --kubeconfig "$KT_RUN/kube-proxy.kubeconfig" \
    --hostname-override "$KT_NODE_NAME" --proxy-mode iptables \
    --cluster-cidr "$KT_POD_CIDR" --nodeport-addresses "$KT_NODE_IP/32" \
    --iptables-localhost-nodeports=false \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 \
    --conntrack-tcp-timeout-close-wait 0 \
    --metrics-bind-address "127.0.0.1:$proxy_metrics_port" \
    --healthz-bind-address "127.0.0.1:$proxy_healthz_port"

  full_kubelet_config
  kt_log "starting kubelet (node $KT_NODE_NAME at $KT_NODE_IP:$kubelet_port)"
  start kubelet "$bin/kubelet" --config "$full/kubelet/config.yaml" \
    --kubeconfig "$KT_RUN/kubelet.kubeconfig" --root-dir "$full/kubelet" \
    --cert-dir "$full/kubelet/pki" --hostname-override "$KT_NODE_NAME" \
    --node-ip "$KT_NODE_IP"
  wait_for kubelet "${k[@]}" wait --for=condition=Ready "node/$KT_NODE_NAME" --timeout=2s
  # kube-proxy reports healthy once it has seen its Node and written the rules.
  wait_for kube-proxy curl -sf "http://127.0.0.1:$proxy_healthz_port/livez"

  kt_log "starting CoreDNS ($KT_DNS_IP) and $KT_PV_COUNT PersistentVolumes"
  sed -e "s|@DNS_IP@|$KT_DNS_IP|g" -e "s|@IMAGE@|$KT_COREDNS_IMAGE|g" \
    -e "s|@DOMAIN@|$KT_CLUSTER_DOMAIN|g" "$KT_CLUSTER/manifests/coredns.yaml" |
    "${k[@]}" apply -f - >/dev/null
  full_storage_manifest | "${k[@]}" apply -f - >/dev/null
  wait_for kubelet "${k[@]}" -n kube-system rollout status deployment/coredns --timeout=2s
}
