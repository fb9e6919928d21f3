#!/usr/bin/env bash
# up.sh [api|full]
#
# Starts a Kubernetes cluster on this machine, made of the real components:
#   api   the integration tier: etcd (Debian's etcd-server), kube-apiserver and
#         kube-controller-manager (garbage collector on), all on 127.0.0.1 at free ports;
#         no scheduler, kubelet or pods.
#   full  the end-to-end tier: a single node that runs real pods. Besides the above,
#         kube-scheduler, kube-proxy (iptables), a kubelet on its own containerd (Debian's,
#         CRI, runc) with the CNI bridge, host-local, portmap and firewall plugins on the
#         bridge kt-cni0 (10.244.0.1/24), CoreDNS as a Deployment behind the kube-dns
#         Service (10.96.0.10, the kubelet's clusterDNS, zone cluster.local), and static
#         hostPath PersistentVolumes of the default StorageClass. The apiserver listens on
#         the bridge's address so that pods reach it through the kubernetes Service.
#         The pause and CoreDNS images are made here and imported into containerd;
#         load-image.sh imports more. See README.md for what it changes on the host.
# State lives in e2e/cluster/.run (ignored by git):
#   .run/kubeconfig   admin kubeconfig (client certificate, certificates embedded)
#   .run/env          sourceable: KUBECONFIG, KT_APISERVER_URL, KT_*_PORT, KT_K8S_BIN
#   .run/bin/         links to the binaries in use (KT_K8S_BIN points here)
#   .run/pids/*.pid   one per process started; down.sh stops exactly these
#   .run/logs/*.log   each component's output
#   .run/pki/         the generated CA, serving and client certificates, service-account key
#   .run/etcd         etcd's data: a link to a directory of /dev/shm (see below), or on disk
#   .run/full/        (full) containerd, kubelet, CNI and volume state; host changes to undo
# Both levels serve the Workload API's PodGroups in the release's group version
# (versions.env: scheduling.k8s.io/v1beta1 on 1.37, v1alpha2 on 1.36): its feature gates
# on kube-apiserver, kube-controller-manager (the PodGroup protection controller) and
# kube-scheduler (the GangScheduling plugin), and the group version in the apiserver's
# --runtime-config. K8S_VERSION picks the release (default v1.37.2).
# KT_WORKLOAD_API=off leaves them out: a cluster without the API, as most are today.
# KT_AUDIT=on writes an audit log of the writes that start a job (.run/logs/audit.log,
# JSON lines, policy in .run/audit-policy.yaml): creates, updates, patches and deletes of
# pods (with their bindings), TrainingJobs, PodGroups and Kueue Workloads, each with
# when the API server received and answered it, the user and the user agent; nothing
# else. For tracing where a job's start-up goes (operator/bench/gang-kueue.sh
# BENCH_TRACE=1); it costs every such write a line in a file, so benchmarks leave it off.
# Running it when the same level is already up and healthy does nothing and succeeds;
# a stale or broken .run is torn down first. Exit status 0 when the cluster is ready.
# shellcheck disable=SC2154 # free_port sets the *_port variables through a nameref
set -euo pipefail
. "$(dirname "$0")/lib.sh"

level=${1:-api}
case $level in api|full) ;; *) kt_die "unknown level '$level'; usage: up.sh [api|full]" ;; esac

SERVICE_CIDR=${KT_SERVICE_CIDR:-10.96.0.0/16}
SERVICE_APISERVER_IP=${KT_SERVICE_APISERVER_IP:-10.96.0.1}
READY_TIMEOUT=${KT_READY_TIMEOUT:-120}
# Alpha gates (versions.env), off by default upstream.
case ${KT_WORKLOAD_API:-on} in
  on)  gates=$(for g in $K8S_WORKLOAD_GATES; do printf '%s=true,' "$g"; done)
       gate_flags=(--feature-gates "${gates%,}")
       api_workload_flags=("${gate_flags[@]}" --runtime-config "$K8S_WORKLOAD_GROUP=true") ;;
  off) gate_flags=(); api_workload_flags=() ;;
  *)   kt_die "KT_WORKLOAD_API must be on or off, got '$KT_WORKLOAD_API'" ;;
esac
case ${KT_AUDIT:-off} in
  on|off) ;;
  *) kt_die "KT_AUDIT must be on or off, got '$KT_AUDIT'" ;;
esac

# kt_pid_alive NAME: true when .run/pids/NAME.pid names a live process of that binary.
kt_pid_alive() {
  local f=$KT_RUN/pids/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  # No pipe into grep -q: under pipefail an early grep exit fails the check by SIGPIPE.
  [ -r "/proc/$pid/cmdline" ] && [[ "$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline")" == *"$2"* ]]
}

already_up() {
  [ -f "$KT_RUN/env" ] && [ -f "$KT_RUN/level" ] && [ "$(cat "$KT_RUN/level")" = "$level" ] ||
    return 1
  kt_pid_alive etcd etcd && kt_pid_alive kube-apiserver kube-apiserver &&
    kt_pid_alive kube-controller-manager kube-controller-manager || return 1
  if [ "$level" = full ]; then
    local c
    for c in kube-scheduler containerd kubelet kube-proxy; do kt_pid_alive "$c" "$c" || return 1; done
  fi
  # shellcheck source=/dev/null
  . "$KT_RUN/env"
  "$KT_K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" get --raw /readyz >/dev/null 2>&1 || return 1
  [ "$level" = api ] ||
    "$KT_K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" wait --for=condition=Ready \
      "node/$KT_NODE_NAME" --timeout=5s >/dev/null 2>&1
}

if already_up; then
  kt_log "cluster ($level) already up; kubeconfig: $KT_RUN/kubeconfig"
  exit 0
fi
if [ -e "$KT_RUN" ]; then
  kt_log "removing a stale or unhealthy $KT_RUN"
  "$KT_CLUSTER/down.sh"
fi

"$KT_CLUSTER/build-k8s.sh" "$level" >/dev/null || kt_die "Kubernetes binaries unavailable"
if [ "$level" = full ]; then
  # shellcheck source=full.sh
  . "$KT_CLUSTER/full.sh"
  full_preflight
fi
etcd_bin=$(kt_etcd) ||
  kt_die "etcd not found (install Debian's etcd-server, or set KT_ETCD or KUBEBUILDER_ASSETS)"
command -v openssl >/dev/null || kt_die "openssl not found"

# free_port VAR: sets VAR to a TCP port nobody uses and that this run has not handed out
# yet (no command substitution: the record of handed-out ports must stay in this shell).
# Ports come from below the kernel's ephemeral range: a component binds its port seconds
# after it was chosen, and in the ephemeral range any outgoing connection on the machine
# (a curl, the apiserver's own clients) could take it first (seen: the scheduler's
# "bind: address already in use" on a busy machine).
declare -A taken=()
ephemeral_lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$ephemeral_lo" -gt 22000 ] 2>/dev/null || ephemeral_lo=32768
# shellcheck disable=SC2034 # var is the caller's variable (a nameref)
free_port() {
  local -n var=$1
  local p busy
  busy=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
  while :; do
    p=$((20000 + RANDOM % (ephemeral_lo - 20000)))
    [ -z "${taken[$p]:-}" ] || continue
    grep -qx "$p" <<<"$busy" && continue
    taken[$p]=1; var=$p; return
  done
}

mkdir -p "$KT_RUN"/{bin,pids,logs,pki}
chmod 700 "$KT_RUN/pki"
# etcd's data in memory (a directory of /dev/shm, .run/etcd linking to it) where /dev/shm
# is a writable tmpfs with room; else on disk in .run/etcd. A test cluster's data needs no
# durability, and etcd fsyncs every write: on a disk that other work fills (a cold
# machine's Go builds and pip installs) one fsync took 140-220 ms where it takes 2 ms,
# and the API servers of the integration tests did not get ready in 120 s.
# KT_ETCD_TMPFS=0 keeps it on disk. down.sh removes it; a directory whose run is gone
# (a run killed before its down.sh) is removed here.
etcd_dir=$KT_RUN/etcd
for d in /dev/shm/kt-etcd.*; do
  [ -d "$d" ] && [ -n "$(find "$d" -maxdepth 0 -mmin +1)" ] || continue
  [ "$(readlink "$(cat "$d/run" 2>/dev/null)/etcd" 2>/dev/null)" = "$d" ] || rm -rf "$d"
done
if [ "${KT_ETCD_TMPFS:-1}" != 0 ] && kt_shm_room &&
  d=$(mktemp -d /dev/shm/kt-etcd.XXXXXX 2>/dev/null); then
  echo "$KT_RUN" >"$d/run"
  mkdir -m 700 "$d/data"
  ln -s "$d" "$KT_RUN/etcd"
  etcd_dir=$d/data
else
  mkdir -m 700 "$etcd_dir"
fi
echo "$level" > "$KT_RUN/level"
# The full level changes the host: a start that fails half way takes it all down again.
[ "$level" = api ] ||
  trap 'rc=$?; [ $rc = 0 ] || { kt_log "up.sh full failed; tearing down"; "$KT_CLUSTER/down.sh"; }' EXIT
# .run/bin links the binaries this run uses, whichever place each came from.
bins=$K8S_API_BINS
[ "$level" = full ] && bins="$bins $K8S_FULL_BINS"
for b in $bins; do ln -sf "$(kt_k8s_bin "$b")" "$KT_RUN/bin/$b"; done
ln -sf "$etcd_bin" "$KT_RUN/bin/etcd"
bin=$KT_RUN/bin
pki=$KT_RUN/pki

# --- certificates -------------------------------------------------------------------
# cert NAME SUBJECT [SAN [CA]]: a key and a certificate signed by CA (default "ca"), for
# server use when SAN is given, otherwise for client use.
cert() {
  local name=$1 subj=$2 san=${3:-} ca=${4:-ca} ext=$pki/$1.ext
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" \
    -CAcreateserial -days 30 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
  -days 30 -sha256 -subj "/CN=kubetrain-e2e-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
apiserver_ip=127.0.0.1 apiserver_san=
[ "$level" = api ] || { apiserver_ip=$KT_NODE_IP; apiserver_san=",IP:$KT_NODE_IP"; }
cert apiserver "/CN=kube-apiserver" \
  "IP:127.0.0.1$apiserver_san,IP:$SERVICE_APISERVER_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=kubetrain-admin"
# The front-proxy (request-header) CA and the apiserver's client certificate under it, as
# kubeadm sets them up: aggregated API servers and the controller-manager's delegated
# authentication read this CA from kube-system/extension-apiserver-authentication.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/front-proxy-ca.key" \
  -out "$pki/front-proxy-ca.crt" -days 30 -sha256 -subj "/CN=kubetrain-e2e-front-proxy-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
cert front-proxy-client "/CN=front-proxy-client" "" front-proxy-ca
cert controller-manager "/CN=system:kube-controller-manager"
[ "$level" = api ] || full_certs
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

# --- ports --------------------------------------------------------------------------
free_port etcd_port
free_port etcd_peer_port
free_port api_port
free_port kcm_port
[ "$level" = api ] || { full_ports; full_host_setup; }
api_url=https://$apiserver_ip:$api_port

# kubeconfig FILE USER: a kubeconfig with the user's client certificate, all embedded.
kubeconfig() {
  local f=$1 user=$2 k=("$bin/kubectl" --kubeconfig "$1")
  rm -f "$f"
  "${k[@]}" config set-cluster kubetrain-e2e --server "$api_url" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  "${k[@]}" config set-credentials "$user" --client-certificate "$pki/$user.crt" \
    --client-key "$pki/$user.key" --embed-certs >/dev/null
  "${k[@]}" config set-context "$user@kubetrain-e2e" --cluster kubetrain-e2e --user "$user" \
    --namespace default >/dev/null
  "${k[@]}" config use-context "$user@kubetrain-e2e" >/dev/null
  chmod 600 "$f"
}
kubeconfig "$KT_RUN/kubeconfig" admin
kubeconfig "$KT_RUN/controller-manager.kubeconfig" controller-manager
[ "$level" = api ] || full_kubeconfigs

{
  printf 'KUBECONFIG=%q\n' "$KT_RUN/kubeconfig"
  printf 'KT_APISERVER_URL=%q\n' "$api_url"
  printf 'KT_APISERVER_PORT=%q\n' "$api_port"
  printf 'KT_ETCD_PORT=%q\n' "$etcd_port"
  printf 'KT_CONTROLLER_MANAGER_PORT=%q\n' "$kcm_port"
  printf 'KT_K8S_BIN=%q\n' "$bin"
  [ "$level" = api ] || full_env
  echo 'export KUBECONFIG'
} > "$KT_RUN/env"

# start NAME CMD...: runs CMD in its own session, output to logs/NAME.log, pid recorded.
start() {
  local name=$1; shift
  setsid "$@" </dev/null >"$KT_RUN/logs/$name.log" 2>&1 &
  echo $! > "$KT_RUN/pids/$name.pid"
}

# kt_pid_running NAME: true while the process .run/pids/NAME.pid records exists and has
# not exited (a zombie has). Not its command line, as kt_pid_alive does: until the child
# has exec'd the binary it reads as this script's, and while the kernel loads a binary it
# reads as empty (the likely cause of a kube-controller-manager taken for dead the second
# it started, its log empty, with three test programs on 2 cores).
kt_pid_running() {
  local f=$KT_RUN/pids/$1.pid
  [ -f "$f" ] && ! kt_exited "$(cat "$f")"
}

# wait_for WHAT CMD...: retries CMD until it succeeds; gives up, stopping everything,
# when the process WHAT exits or READY_TIMEOUT seconds pass.
wait_for() {
  local what=$1 deadline=$((SECONDS + READY_TIMEOUT)); shift
  until "$@" >/dev/null 2>&1; do
    if ! kt_pid_running "$what" || [ $SECONDS -ge $deadline ]; then
      kt_log "$what not ready (exited, or not ready after ${READY_TIMEOUT}s); last log lines:"
      tail -n 20 "$KT_RUN/logs/$what.log" >&2 || true
      "$KT_CLUSTER/down.sh"
      exit 1
    fi
    sleep 0.5
  done
}

fail_if_dead() { kt_pid_alive "$1" "$1" || { tail -n 20 "$KT_RUN/logs/$1.log" >&2; return 1; }; }

# --- etcd ---------------------------------------------------------------------------
kt_log "starting etcd on 127.0.0.1:$etcd_port"
start etcd "$bin/etcd" --name kubetrain-e2e --data-dir "$etcd_dir" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" \
  --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "kubetrain-e2e=http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster-state new --quota-backend-bytes 2147483648 --log-level warn
wait_for etcd curl -sf "http://127.0.0.1:$etcd_port/health"

# --- audit (KT_AUDIT=on) ----------------------------------------------------------------
# Metadata level (no bodies), stage ResponseComplete only: one line per write, with
# requestReceivedTimestamp and stageTimestamp in microseconds.
audit_flags=()
if [ "${KT_AUDIT:-off}" = on ]; then
  cat > "$KT_RUN/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - {group: "", resources: [pods, pods/binding, pods/status]}
      - {group: kubetrain.dev, resources: [trainingjobs, trainingjobs/status]}
      - {group: scheduling.k8s.io, resources: [podgroups]}
      - {group: kueue.x-k8s.io, resources: [workloads, workloads/status]}
  - level: None
EOF
  audit_flags=(--audit-policy-file "$KT_RUN/audit-policy.yaml"
    --audit-log-path "$KT_RUN/logs/audit.log" --audit-log-format json
    --audit-log-maxbackup 1 --audit-log-maxsize 200)
fi

# --- kube-apiserver -----------------------------------------------------------------
# api: bound to loopback, it cannot publish itself as the endpoint of the "kubernetes"
# Service (loopback addresses are refused there), so it does not try: nothing at this
# level runs in a pod. full: bound to the node's address on the pod bridge, it is the
# endpoint of that Service, and it reaches the kubelet with a client certificate.
api_level_flags=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1
  --endpoint-reconciler-type none)
[ "$level" = full ] && api_level_flags=(--bind-address "$KT_NODE_IP"
  --advertise-address "$KT_NODE_IP" --endpoint-reconciler-type lease
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt"
  --kubelet-client-key "$pki/apiserver-kubelet-client.key"
  --kubelet-preferred-address-types InternalIP)
kt_log "starting kube-apiserver on $api_url"
start kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  "${api_level_flags[@]}" --secure-port "$api_port" \
  --cert-dir "$pki" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" \
  --proxy-client-key-file "$pki/front-proxy-client.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" \
  --authorization-mode RBAC,Node \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --allow-privileged=true \
  "${api_workload_flags[@]}" "${audit_flags[@]}" \
  --profiling=false
wait_for kube-apiserver "$bin/kubectl" --kubeconfig "$KT_RUN/kubeconfig" get --raw /readyz

# --- kube-controller-manager --------------------------------------------------------
kt_log "starting kube-controller-manager (health on 127.0.0.1:$kcm_port)"
kcm_kc=$KT_RUN/controller-manager.kubeconfig
start kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$kcm_kc" \
  --authentication-kubeconfig "$kcm_kc" --authorization-kubeconfig "$kcm_kc" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$KT_RUN/pki/kcm" \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --enable-garbage-collector=true --controllers '*' \
  "${gate_flags[@]}" \
  --profiling=false
wait_for kube-controller-manager curl -skf "https://127.0.0.1:$kcm_port/healthz"

[ "$level" = api ] || full_start
components="etcd kube-apiserver kube-controller-manager"
[ "$level" = full ] && components="$components kube-scheduler containerd kubelet kube-proxy"
for c in $components; do fail_if_dead "$c" ||
  { "$KT_CLUSTER/down.sh"; kt_die "$c exited during start-up"; }; done
kt_log "cluster ($level) up; export KUBECONFIG=$KT_RUN/kubeconfig"
