#!/usr/bin/env bash
# The template policy's cases (operator/tests/podpolicy-cases.json, which podpolicy.c and
# the chart's ValidatingAdmissionPolicy are tested against) checked against the API
# server's own Pod Security admission: each case's template made a pod (its metadata and
# spec; a container "trainer" when it has none, and an image for each container) and
# created with a server-side dry run in a namespace labelled
# pod-security.kubernetes.io/enforce=baseline (version latest). A case the policy refuses
# must be refused by Pod Security, and an allowed one admitted, so that the three cannot
# drift apart when Pod Security's baseline changes (1.34 added probe and hook hosts).
# Cases marked beyondBaseline (kubetrain's own rules: the service account, and an
# unmasked /proc, which baseline allows in a user namespace) are left out.
set -uo pipefail # no -e: a failed case is reported and the others still run
cd "$(dirname "$0")/../../.." || exit 1
. e2e/lib/tap.sh
. operator/tests/integration/lib.sh

CASES=operator/tests/podpolicy-cases.json
it_cluster test-pod-security
ns psa
k label namespace psa pod-security.kubernetes.io/enforce=baseline \
  pod-security.kubernetes.io/enforce-version=latest >/dev/null

# One pod per case in $IT_DIR/pod-I.json; a line "I<TAB>field or -<TAB>name<TAB>must" each.
# What pod validation requires beside a field is added (it refuses before admission):
# hostNetwork beside a Windows host process, which baseline refuses too, so Pod Security's
# message must also name the case's own check ("must").
python3 - "$CASES" "$IT_DIR" >"$IT_DIR/cases.tsv" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
for i, c in enumerate(cases):
    if c.get("beyondBaseline"):
        continue
    t = c["template"]
    spec = json.loads(json.dumps(t.get("spec", {})))
    spec.setdefault("containers", [{"name": "trainer"}])
    text = json.dumps(spec)
    must = "-"
    if '"hostProcess": true' in text:
        spec["hostNetwork"] = True
        must = "hostProcess"
    for lst in ("containers", "initContainers"):
        for ct in spec.get(lst, []):
            ct.setdefault("image", "busybox")
    md = dict(t.get("metadata", {}), name="case-%d" % i)
    json.dump({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec},
              open("%s/pod-%d.json" % (sys.argv[2], i), "w"))
    print(i, c["field"] or "-", c["name"], must, sep="\t")
PY
n=0 bad=()
while IFS=$'\t' read -r i field name must; do
  n=$((n + 1))
  out=$(k -n psa create --dry-run=server -f "$IT_DIR/pod-$i.json" 2>&1); rc=$?
  if [ "$field" = - ]; then
    [ $rc = 0 ] || bad+=("$name: allowed by the policy, refused by the API server: $out")
  elif [ $rc = 0 ]; then
    bad+=("$name: refused by the policy ($field), admitted by Pod Security baseline")
  elif ! grep -q 'violates PodSecurity "baseline:latest"' <<<"$out"; then
    bad+=("$name: refused, but not by Pod Security: $out")
  elif [ "$must" != - ] && ! grep -qF "$must" <<<"$out"; then
    bad+=("$name: Pod Security's refusal does not name $must: $out")
  fi
done <"$IT_DIR/cases.tsv"
if [ "$n" -gt 20 ] && [ ${#bad[@]} = 0 ]; then
  tap_ok "Pod Security baseline refuses the cases podpolicy-cases.json refuses, admits others ($n)"
else
  tap_fail "Pod Security baseline agrees with podpolicy-cases.json ($n cases)" \
    "$(printf '%s\n' "${bad[@]}")"
fi
tap_done
