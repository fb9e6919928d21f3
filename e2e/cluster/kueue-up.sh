#!/usr/bin/env bash
# kueue-up.sh
#
# Runs Kueue (KUEUE_VERSION of versions.env, built by build-kueue.sh) on the cluster that
# up.sh started (api or full level, state in KT_RUN), the way the other control-plane
# components run: the manager as a host process, pid in .run/pids/kueue.pid, log in
# .run/logs/kueue.log, stopped by down.sh. Steps:
#   1. Kueue's CRDs, applied from the module's source in the Go module cache
#      (config/components/crd/bases of sigs.k8s.io/kueue@KUEUE_VERSION); the CRDs that
#      serve two versions get their conversion webhook (/convert) at the host process;
#   2. a serving certificate for 127.0.0.1 signed by the cluster's CA (.run/pki/ca.*),
#      used for the webhooks and the metrics endpoint (Kueue's own certificate
#      management is off: it would want an in-cluster Service and Secret);
#   3. the manager with .run/kueue/config.yaml: the pod integration only, pods in
#      kube-system and kueue-system never managed, no job managed without the
#      kueue.x-k8s.io/queue-name label, leader election off, the admin kubeconfig;
#   4. the Mutating- and ValidatingWebhookConfigurations of Kueue's own types and of
#      pods, from the module's config/components/webhook/manifests.yaml, each
#      clientConfig an URL at 127.0.0.1 with the cluster's CA as caBundle; the pod
#      webhooks see only pods labelled kueue.x-k8s.io/queue-name (objectSelector), so an
#      outage of the manager blocks no other pod;
# The queues are the users' part: `kubectl apply -n NAMESPACE -f examples/kueue/queues.yaml`
# makes a ResourceFlavor, a ClusterQueue with a CPU and memory quota and a LocalQueue
# (the e2e scenario kueue does so in its namespace, which the suite makes anew).
# Kueue reads /etc/kueue/metrics/certs/tls.{crt,key} at start whenever its certificate
# management is off (a fixed path in its main.go): the manager runs in a private mount
# namespace where that directory is a bind mount of .run/kueue/certs; on the host the
# directory is made empty when missing and recorded in .run/kueue/made-dirs for down.sh.
# Running it while this run's Kueue is up and ready does nothing. Exit status 0 when Kueue
# answers its readiness probe and its webhooks are registered; .run/kueue/env then has
# KT_KUEUE_WEBHOOK_PORT, KT_KUEUE_HEALTH_PORT, KT_KUEUE_METRICS_PORT, KT_KUEUE_VERSION.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -f "$KT_RUN/env" ] || kt_die "no cluster in $KT_RUN (run e2e/cluster/up.sh first)"
# shellcheck source=/dev/null
. "$KT_RUN/env"
k=("$KT_K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG" --request-timeout 30s)
READY_TIMEOUT=${KT_READY_TIMEOUT:-120}
kdir=$KT_RUN/kueue
pki=$KT_RUN/pki
METRICS_CERTS=/etc/kueue/metrics/certs

alive() {
  local pid
  pid=$(cat "$KT_RUN/pids/kueue.pid" 2>/dev/null) || return 1
  [[ "$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline")" == *kueue* ]]
}
if alive && [ -f "$kdir/env" ]; then
  # shellcheck source=/dev/null
  . "$kdir/env"
  if curl -sf "http://127.0.0.1:$KT_KUEUE_HEALTH_PORT/readyz" >/dev/null; then
    kt_log "Kueue already up (log $KT_RUN/logs/kueue.log)"
    exit 0
  fi
fi
alive && kt_die "a Kueue manager of $KT_RUN runs but is not ready; stop it with down.sh"

kueue_bin=$("$KT_CLUSTER/build-kueue.sh") || kt_die "the Kueue manager is unavailable"
crds=$("$KT_CLUSTER/build-kueue.sh" crds) || kt_die "Kueue's CRDs are unavailable"
src=${crds%/config/components/crd/bases}
command -v jq >/dev/null || kt_die "jq not found (Debian package jq)"
command -v unshare >/dev/null || kt_die "unshare not found (Debian package util-linux)"
[ "$(id -u)" = 0 ] ||
  kt_die "kueue-up.sh must run as root (a private mount namespace for $METRICS_CERTS)"

mkdir -p "$kdir/certs"
chmod 700 "$kdir/certs"

# --- ports -----------------------------------------------------------------------------
# Below the ephemeral range and unused, as up.sh chooses them.
lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$lo" -gt 22000 ] 2>/dev/null || lo=32768
busy=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
pick() {
  local p
  while :; do
    p=$((20000 + RANDOM % (lo - 20000)))
    grep -qx "$p" <<<"$busy" && continue
    busy=$busy$'\n'$p
    echo "$p"; return
  done
}
wh_port=$(pick) health_port=$(pick) metrics_port=$(pick)

# --- certificate -------------------------------------------------------------------------
openssl genrsa -out "$kdir/certs/tls.key" 2048 2>/dev/null
openssl req -new -key "$kdir/certs/tls.key" -subj "/CN=kueue-webhook" \
  -out "$kdir/certs/tls.csr" 2>/dev/null
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" > "$kdir/certs/ext"
openssl x509 -req -in "$kdir/certs/tls.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
  -CAcreateserial -days 30 -sha256 -extfile "$kdir/certs/ext" \
  -out "$kdir/certs/tls.crt" 2>/dev/null || kt_die "signing Kueue's certificate failed"
rm -f "$kdir/certs/tls.csr" "$kdir/certs/ext"
ca_bundle=$(base64 -w0 < "$pki/ca.crt")
base=https://127.0.0.1:$wh_port

# --- CRDs ---------------------------------------------------------------------------------
kt_log "applying Kueue $KUEUE_VERSION CRDs from $crds"
"${k[@]}" apply --server-side --force-conflicts -f "$crds" >/dev/null ||
  kt_die "applying Kueue's CRDs from $crds failed"
# The CRDs that serve v1beta1 beside the stored v1beta2 convert through the manager, as
# the release's kustomization sets up (config/components/crd/patches/webhook_in_*).
conv=$(jq -nc --arg url "$base/convert" --arg ca "$ca_bundle" \
  '{spec: {conversion: {strategy: "Webhook", webhook: {conversionReviewVersions: ["v1"],
     clientConfig: {url: $url, caBundle: $ca}}}}}')
for c in localqueues clusterqueues cohorts workloads multikueueclusters; do
  "${k[@]}" patch crd "$c.kueue.x-k8s.io" --type merge -p "$conv" >/dev/null ||
    kt_die "setting the conversion webhook of $c.kueue.x-k8s.io failed"
done
"${k[@]}" wait --for=condition=Established --timeout=60s -f "$crds" >/dev/null ||
  kt_die "Kueue's CRDs are not Established"
"${k[@]}" create namespace kueue-system --dry-run=client -o yaml | "${k[@]}" apply -f - >/dev/null

# --- manager ------------------------------------------------------------------------------
cat > "$kdir/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$health_port
metrics:
  bindAddress: 127.0.0.1:$metrics_port
webhook:
  host: 127.0.0.1
  port: $wh_port
  certDir: $kdir/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}
integrations:
  frameworks: [pod]
EOF
{
  printf 'KT_KUEUE_WEBHOOK_PORT=%q\n' "$wh_port"
  printf 'KT_KUEUE_HEALTH_PORT=%q\n' "$health_port"
  printf 'KT_KUEUE_METRICS_PORT=%q\n' "$metrics_port"
  printf 'KT_KUEUE_VERSION=%q\n' "$KUEUE_VERSION"
} > "$kdir/env"

# The fixed metrics certificate path: made empty on the host when missing (recorded),
# bind-mounted from $kdir/certs inside the manager's own mount namespace.
d=$METRICS_CERTS
made=()
while [ ! -e "$d" ]; do made+=("$d"); d=$(dirname "$d"); done
if [ ${#made[@]} -gt 0 ]; then
  mkdir -p "$METRICS_CERTS"
  printf '%s\n' "${made[@]}" > "$kdir/made-dirs"
fi
[ -d "$METRICS_CERTS" ] || kt_die "$METRICS_CERTS is not a directory"

kt_log "starting Kueue $KUEUE_VERSION (webhooks on $base, health on 127.0.0.1:$health_port)"
# VisibilityOnDemand (beta, on by default) would serve an aggregated API that needs an
# APIService pointing into the cluster: off.
# shellcheck disable=SC2016 # $1.. are the inner shell's arguments
setsid unshare --mount --propagation private sh -c \
  'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh "$kdir/certs" "$METRICS_CERTS" \
  env KUBECONFIG="$KUBECONFIG" "$kueue_bin" --config "$kdir/config.yaml" \
  --feature-gates VisibilityOnDemand=false --zap-log-level 2 \
  </dev/null >"$KT_RUN/logs/kueue.log" 2>&1 &
echo $! > "$KT_RUN/pids/kueue.pid"
deadline=$((SECONDS + READY_TIMEOUT))
until curl -sf "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1; do
  if [ $SECONDS -ge $deadline ] || ! kill -0 "$(cat "$KT_RUN/pids/kueue.pid")" 2>/dev/null; then
    tail -n 20 "$KT_RUN/logs/kueue.log" >&2
    kt_die "Kueue not ready (exited, or not ready after ${READY_TIMEOUT}s);" \
      "log $KT_RUN/logs/kueue.log"
  fi
  sleep 0.5
done

# --- webhooks -----------------------------------------------------------------------------
# The release's webhooks for Kueue's own types and for pods (the only integration on).
"${k[@]}" create --dry-run=client -o json -f "$src/config/components/webhook/manifests.yaml" |
  jq --arg base "$base" --arg ca "$ca_bundle" '
    (if .kind == "List" then .items else [.] end)[]
    | .metadata = {name: ("kueue-" + .metadata.name), labels: {"kubetrain.dev/kueue-up": "true"}}
    | .webhooks |= map(
        select(.clientConfig.service.path | test("kueue-x-k8s-io|--v1-pod$"))
        | .clientConfig = {url: ($base + .clientConfig.service.path), caBundle: $ca}
        | if (.rules[0].resources | index("pods")) then
            .namespaceSelector = {matchExpressions: [{key: "kubernetes.io/metadata.name",
              operator: "NotIn", values: ["kube-system", "kueue-system"]}]}
            | .objectSelector = {matchExpressions: [{key: "kueue.x-k8s.io/queue-name",
              operator: "Exists"}]}
          else . end)' > "$kdir/webhooks.json" ||
  kt_die "making the webhook configurations from $src/config/components/webhook failed"
"${k[@]}" apply -f "$kdir/webhooks.json" >/dev/null || kt_die "registering Kueue's webhooks failed"

# The apiserver's view of a new webhook configuration lags a little: wait until a
# ResourceFlavor dry run goes through Kueue's webhooks.
probe='{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"probe"}}'
for _ in $(seq 60); do
  "${k[@]}" create --dry-run=server -o name -f - <<<"$probe" >/dev/null 2>&1 && break
  sleep 0.5
done
kt_log "Kueue $KUEUE_VERSION up; queues: kubectl apply -n NAMESPACE -f examples/kueue/queues.yaml"
