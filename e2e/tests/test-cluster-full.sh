#!/usr/bin/env bash
# The full-level cluster harness: up.sh full brings a Ready node; a pod of the local base
# image (kubetrain/base:bookworm, imported with load-image.sh) runs a command and
# Succeeds and reaches the apiserver by the kubernetes Service's name; two pods under a
# headless Service resolve each other by <pod>.<svc>.<ns>.svc.cluster.local (and the
# short <pod>.<svc>.<ns>.svc of TF_CONFIG) through CoreDNS and exchange bytes over TCP; a
# PersistentVolumeClaim binds to one of the harness's volumes and a pod's write lands in
# it; down.sh leaves no process, mount, bridge, iptables chain, cgroup or run directory.
# Uses its own run directory (build/e2e/test-cluster-full). Skips, saying why, when the
# machine cannot run a node (not root, no containerd/runc/CNI plugins, another full
# cluster holds the bridge); a failed build of the binaries is a failure.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

export KT_RUN=$PWD/build/e2e/test-cluster-full/run
NS=kt-e2e-full
BASE=${KT_BASE_IMAGE:-kubetrain/base:bookworm}

skip_all() { tap_skip "full-level cluster harness" "$1"; tap_done; exit 0; }

[ "$(id -u)" = 0 ] || skip_all "needs root (containerd, kubelet, bridge)"
for c in containerd runc ctr iptables ip gcc; do
  command -v "$c" >/dev/null || skip_all "$c not installed (make deps installs DEPS_APT)"
done
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/firewall ] ||
  skip_all "CNI plugins not installed (Debian package containernetworking-plugins)"
ip link show kt-cni0 >/dev/null 2>&1 &&
  skip_all "bridge kt-cni0 exists: another full-level cluster runs on this machine"
fail_all() { tap_fail "$1" "$(tail -n 5 <<<"$2")"; tap_done; exit 1; }
if ! err=$(bash e2e/cluster/build-k8s.sh full 2>&1 >/dev/null); then
  fail_all "building the Kubernetes binaries (e2e/cluster/build-k8s.sh full)" "$err"
fi
if ! err=$(bash e2e/cluster/build-coredns.sh 2>&1 >/dev/null); then
  fail_all "building CoreDNS (e2e/cluster/build-coredns.sh)" "$err"
fi
bash -c '. e2e/cluster/lib.sh && kt_etcd' >/dev/null ||
  skip_all "etcd not installed (Debian package etcd-server)"

trap 'bash e2e/cluster/down.sh >/dev/null 2>&1' EXIT
bash e2e/cluster/down.sh >/dev/null 2>&1

# What the host looks like before: to compare with after down.sh.
chains() {
  local c t
  for c in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$c-save" -t "$t" 2>/dev/null | sed -n "s/^:\(\(CNI\|KUBE\|KT\)-[^ ]*\) .*/$c $t \1/p"
    done
  done | sort
}
sysctls() { sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.conf.all.route_localnet 2>/dev/null; }
chains_before=$(chains)
sysctls_before=$(sysctls)

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}'; }

t0=$(date +%s.%N)
if out=$(bash e2e/cluster/up.sh full 2>&1); then
  tap_ok "up.sh full succeeds ($(since "$t0")s)"
else
  tap_fail "up.sh full succeeds" "$(tail -n 30 <<<"$out")"; tap_done; exit
fi
# shellcheck source=/dev/null # the cluster's variables, written by e2e/cluster/up.sh
. "$KT_RUN/env"
k() { "$KT_K8S_BIN/kubectl" --request-timeout 30s "$@"; }
pids=$(cat "$KT_RUN"/pids/*.pid)

out=$(k get node "$KT_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>&1)
if [ "$out" = True ]; then tap_ok "node $KT_NODE_NAME is Ready"
else tap_fail "node $KT_NODE_NAME is Ready" "$out"; fi
out=$(k -n kube-system get deploy coredns -o 'jsonpath={.status.availableReplicas}' 2>&1)
if [ "$out" = 1 ]; then tap_ok "CoreDNS Deployment available behind kube-dns ($KT_DNS_IP)"
else tap_fail "CoreDNS Deployment available" "$out"; fi

t0=$(date +%s.%N)
if out=$(bash e2e/cluster/up.sh full 2>&1) && [ "$(cat "$KT_RUN"/pids/*.pid)" = "$pids" ]; then
  tap_ok "up.sh full again is a no-op ($(since "$t0")s)"
else tap_fail "up.sh full again is a no-op" "$out"; fi

# wait_phase POD PHASE SECONDS: true when the pod reaches PHASE in time.
wait_phase() {
  local p
  for _ in $(seq $(($3 * 2))); do
    p=$(k -n "$NS" get pod "$1" -o 'jsonpath={.status.phase}' 2>/dev/null)
    [ "$p" = "$2" ] && return 0
    [ "$p" = Failed ] && [ "$2" != Failed ] && return 1
    sleep 0.5
  done
  return 1
}
explain() { k -n "$NS" describe pod "$1" 2>&1 | tail -n 15; k -n "$NS" logs "$1" 2>&1 | tail -n 10; }

k create namespace "$NS" >/dev/null
for _ in $(seq 60); do k -n "$NS" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5; done

have_base=0
# The base image is this tier's own prerequisite: made here when Docker lacks it (an
# import of the cached debootstrap tarball, or a debootstrap on a fresh machine).
base_err=
if ! docker image inspect "$BASE" >/dev/null 2>&1 && [ "$BASE" = kubetrain/base:bookworm ]; then
  base_err=$( (bash docker/dockerd.sh && bash docker/base.sh "$BASE") 2>&1 >/dev/null) || true
fi
if ! docker image inspect "$BASE" >/dev/null 2>&1 && [ "$BASE" = kubetrain/base:bookworm ]; then
  tap_fail "making the base image (docker/dockerd.sh, docker/base.sh)" "$(tail -n 5 <<<"$base_err")"
elif ! docker image inspect "$BASE" >/dev/null 2>&1; then
  tap_skip "pod of the base image" "Docker has no $BASE (make image-base makes it)"
  tap_skip "a pod reaches the apiserver at kubernetes.default.svc:443" "no $BASE"
  tap_skip "two pods resolve each other through CoreDNS and talk TCP" "no $BASE"
  tap_skip "a pod writes to a PersistentVolumeClaim" "no $BASE"
elif ! out=$(bash e2e/cluster/load-image.sh "$BASE" 2>&1); then
  tap_fail "load-image.sh imports $BASE" "$out"
else
  have_base=1
  tap_ok "load-image.sh imports $BASE into containerd ($(tail -n 1 <<<"$out"))"
fi

if [ $have_base = 1 ]; then
  # --- one pod runs a command to completion --------------------------------------
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: hello}
spec:
  restartPolicy: Never
  containers:
    - name: hello
      image: $BASE
      imagePullPolicy: Never
      command:
        - bash
        - -c
        - |
          echo "hello from \$(hostname) on debian \$(cat /etc/debian_version)"
          if exec 3<>/dev/tcp/kubernetes.default.svc/443; then echo "apiserver reachable"; fi
EOF
  if wait_phase hello Succeeded 90; then
    out=$(k -n "$NS" logs hello 2>&1)
    if grep -q '^hello from hello on debian 12' <<<"$out"; then
      tap_ok "a pod of $BASE runs its command and Succeeds"
    else tap_fail "a pod of $BASE runs its command and Succeeds" "$out"; fi
    # What the operator's pod needs: the apiserver by the kubernetes Service's name.
    if grep -qx 'apiserver reachable' <<<"$out"; then
      tap_ok "a pod reaches the apiserver at kubernetes.default.svc:443 (CoreDNS, kube-proxy)"
    else tap_fail "a pod reaches the apiserver at kubernetes.default.svc:443" "$out"; fi
  else
    tap_fail "a pod of $BASE runs its command and Succeeds" "$(explain hello)"
    tap_skip "a pod reaches the apiserver at kubernetes.default.svc:443" "the pod did not run"
  fi

  # --- two pods under a headless Service: DNS names and TCP ------------------------
  # Each resolves the other's name, peer-0 serves one line back over TCP, peer-1 sends
  # it and checks the answer; both must Succeed.
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: peers}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: peers}
  ports: [{name: talk, port: 7000}]
---
apiVersion: v1
kind: Pod
metadata: {name: peer-0, labels: {app: peers}}
spec:
  hostname: peer-0
  subdomain: peers
  restartPolicy: Never
  containers:
    - name: peer
      image: $BASE
      imagePullPolicy: Never
      command:
        - bash
        - -c
        - |
          other=peer-1.peers.$NS.svc.$KT_CLUSTER_DOMAIN
          for i in \$(seq 120); do getent hosts \$other && break; sleep 0.5; done
          getent hosts \$other || { echo "cannot resolve \$other"; exit 1; }
          exec perl -MIO::Socket::INET -e '
            my \$s = IO::Socket::INET->new(LocalPort => 7000, Listen => 1, ReuseAddr => 1) or die "listen: \$!";
            alarm 60;
            my \$c = \$s->accept or die "accept: \$!";
            my \$line = <\$c>; chomp \$line;
            print "got: \$line\n";
            print \$c "pong \$line\n";
            close \$c;'
---
apiVersion: v1
kind: Pod
metadata: {name: peer-1, labels: {app: peers}}
spec:
  hostname: peer-1
  subdomain: peers
  restartPolicy: Never
  containers:
    - name: peer
      image: $BASE
      imagePullPolicy: Never
      command:
        - bash
        - -c
        - |
          other=peer-0.peers.$NS.svc
          for i in \$(seq 120); do
            if exec 3<>/dev/tcp/\$other/7000; then break; fi 2>/dev/null
            sleep 0.5
          done
          getent hosts \$other || { echo "cannot resolve \$other"; exit 1; }
          echo "ping from \$(hostname -f)" >&3
          read -r -t 30 reply <&3
          echo "reply: \$reply"
          [ "\$reply" = "pong ping from \$(hostname -f)" ]
EOF
  if wait_phase peer-0 Succeeded 120 && wait_phase peer-1 Succeeded 30; then
    ip0=$(k -n "$NS" get pod peer-0 -o 'jsonpath={.status.podIP}')
    ip1=$(k -n "$NS" get pod peer-1 -o 'jsonpath={.status.podIP}')
    l0=$(k -n "$NS" logs peer-0); l1=$(k -n "$NS" logs peer-1)
    fq1=peer-1.peers.$NS.svc.$KT_CLUSTER_DOMAIN
    if grep -q "^$ip1 *$fq1" <<<"$l0" && grep -q "^$ip0 " <<<"$l1" &&
       grep -qx "got: ping from $fq1" <<<"$l0" && grep -qx "reply: pong ping from $fq1" <<<"$l1"; then
      tap_ok "peer-0 and peer-1 resolve each other (<pod>.peers.$NS.svc.$KT_CLUSTER_DOMAIN; <pod>.peers.$NS.svc by search path) and exchange a line over TCP"
    else tap_fail "peers resolve each other and exchange a line" "peer-0 ($ip0): $l0"$'\n'"peer-1 ($ip1): $l1"; fi
  else tap_fail "peers resolve each other and exchange a line" "$(explain peer-0; explain peer-1)"; fi

  # --- a claim binds to a harness volume and a pod's write lands in it -------------
  k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ckpt}
spec:
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  restartPolicy: Never
  containers:
    - name: writer
      image: $BASE
      imagePullPolicy: Never
      command: [bash, -c, 'mkdir -p /checkpoints/job && echo "step 42" > /checkpoints/job/ckpt && sync']
      volumeMounts: [{name: ckpt, mountPath: /checkpoints}]
  volumes: [{name: ckpt, persistentVolumeClaim: {claimName: ckpt}}]
EOF
  if wait_phase writer Succeeded 90; then
    pv=$(k -n "$NS" get pvc ckpt -o 'jsonpath={.spec.volumeName}')
    path=$(k get pv "$pv" -o 'jsonpath={.spec.hostPath.path}' 2>/dev/null)
    if [ -n "$pv" ] && [ "$(cat "$path/job/ckpt" 2>/dev/null)" = "step 42" ]; then
      tap_ok "claim ckpt (default StorageClass) binds to $pv and a pod's write lands in it"
    else tap_fail "claim ckpt binds and a pod's write lands in it" "pv=$pv path=$path"; fi
  else tap_fail "claim ckpt binds and a pod's write lands in it" \
    "$(k -n "$NS" describe pvc ckpt | tail -n 5; explain writer)"; fi
fi

# --- down.sh leaves nothing ---------------------------------------------------------
sock=$KT_CONTAINERD_ADDRESS
if out=$(bash e2e/cluster/down.sh 2>&1); then tap_ok "down.sh succeeds"
else tap_fail "down.sh succeeds" "$out"; fi
left=
for p in $pids; do [ -d "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ] && left="$left $p"; done
for p in /proc/[0-9]*; do
  [[ $'\n'"$(tr '\0' '\n' 2>/dev/null < "$p/cmdline")"$'\n' == *$'\n'"$sock"$'\n'* ]] &&
    left="$left ${p#/proc/}"
done
# shellcheck disable=SC2086 # a list of process ids, one word each
if [ -z "$left" ]; then tap_ok "no component or shim process left"
else tap_fail "no component or shim process left" "$(ps -o pid,args -p $left)"; fi
mounts=$(awk -v r="$KT_RUN/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo)
if [ -z "$mounts" ] && [ ! -e "$KT_RUN" ]; then tap_ok "no mount and no run directory left"
else tap_fail "no mount and no run directory left" "$mounts"; fi
if ! ip link show "$KT_CNI_BRIDGE" >/dev/null 2>&1 && ! ip route | grep -q "dev $KT_CNI_BRIDGE"; then
  tap_ok "bridge $KT_CNI_BRIDGE and its routes removed"
else tap_fail "bridge $KT_CNI_BRIDGE removed" "$(ip -br link show "$KT_CNI_BRIDGE")"; fi
after=$(chains)
if [ "$after" = "$chains_before" ]; then tap_ok "iptables and ip6tables chains as before (no CNI-, KUBE-, KT- chain left)"
else tap_fail "iptables chains as before" "$(diff <(echo "$chains_before") <(echo "$after"))"; fi
cg=$(ls -d /sys/fs/cgroup/*/kubetrain-e2e 2>/dev/null)
if [ -z "$cg" ]; then tap_ok "kubelet cgroups removed"
else tap_fail "kubelet cgroups removed" "$cg"; fi
if [ "$(sysctls)" = "$sysctls_before" ]; then tap_ok "kernel settings restored"
else tap_fail "kernel settings restored" "$(diff <(echo "$sysctls_before") <(sysctls))"; fi
tap_check "down.sh when nothing is up succeeds" bash e2e/cluster/down.sh

tap_done
