#!/usr/bin/env bash
# The kind cluster's config (e2e/run.sh kind-config): for a node image of v1.36 or later
# it turns on the Workload API with the same gates and group version as up.sh's
# clusters of that release; for kind's default image, an older one or KT_WORKLOAD_API=off it is
# e2e/cluster/kind.yaml unchanged. kind itself cannot run on this machine (no privileged
# containers), so the config is checked as YAML, not by a kind cluster.
set -uo pipefail # no -e: a failing check is reported (not ok) and the test goes on
cd "$(dirname "$0")/../.." || exit 1
. e2e/lib/tap.sh

# as_json: YAML on stdin as JSON with sorted keys.
as_json() {
  python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin), sort_keys=True))'
}
# config KT_KIND_IMAGE [KT_WORKLOAD_API]: the config as JSON.
config() { KT_KIND_IMAGE=$1 KT_WORKLOAD_API=${2:-on} bash e2e/run.sh kind-config | as_json; }
plain=$(as_json <e2e/cluster/kind.yaml)

# want GATES GROUP: kind.yaml with those gates and that group version, as JSON.
want() {
  python3 - "$1" "$2" "$plain" <<'EOF'
import json, sys
gates, group, plain = sys.argv[1].split(), sys.argv[2], json.loads(sys.argv[3])
plain["featureGates"] = {g: True for g in gates}
plain["runtimeConfig"] = {group: "true"}
print(json.dumps(plain, sort_keys=True))
EOF
}
# The release's own Workload API: v1alpha2 with two alpha gates on 1.36, v1beta1 with
# GenericWorkload alone from 1.37 (as versions.env has it for up.sh).
for case in "kindest/node:v1.36.3|GenericWorkload GangScheduling|scheduling.k8s.io/v1alpha2" \
            "kindest/node:v1.37.0@sha256:0123|GenericWorkload|scheduling.k8s.io/v1beta1" \
            "kindest/node:v1.37.2|GenericWorkload|scheduling.k8s.io/v1beta1" \
            "kindest/node:v1.40.1|GenericWorkload|scheduling.k8s.io/v1beta1"; do
  IFS='|' read -r img gates group <<<"$case"
  got=$(config "$img") what="featureGates $gates, runtimeConfig $group"
  if [ "$got" = "$(want "$gates" "$group")" ]; then tap_ok "$img: kind.yaml with $what"
  else tap_fail "$img: kind.yaml with $what" "got $got, want $(want "$gates" "$group")"; fi
done
for img in "" kindest/node:v1.35.2 kindest/node:latest kindest/node:v1.3.0; do
  got=$(config "$img") name=${img:-"no KT_KIND_IMAGE (the default image)"}
  if [ "$got" = "$plain" ]; then tap_ok "$name: kind.yaml unchanged"
  else tap_fail "$name: kind.yaml unchanged" "got $got"; fi
done
got=$(config kindest/node:v1.36.3 off)
if [ "$got" = "$plain" ]; then tap_ok "KT_WORKLOAD_API=off: kind.yaml unchanged"
else tap_fail "KT_WORKLOAD_API=off: kind.yaml unchanged" "got $got"; fi

# The same gates as up.sh passes its components.
flags=$(grep -o 'feature-gates "[^"]*"' e2e/cluster/up.sh)
# shellcheck disable=SC2016 # the text of up.sh is compared, not expanded
if [ "$flags" = 'feature-gates "${gates%,}"' ]; then
  tap_ok "up.sh builds its --feature-gates from K8S_WORKLOAD_GATES too"
else
  tap_fail "up.sh builds its --feature-gates from K8S_WORKLOAD_GATES" "up.sh has: $flags"
fi
tap_done
