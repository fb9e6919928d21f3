#!/usr/bin/env python3
"""check-render.py MODE FILE RELEASE NAMESPACE [OPERATOR_MAIN_C]

Facts about one `helm template` output of charts/kubetrain, for test-chart.sh. MODE is
what the values asked for: default | single (singleNamespace=true) | noleader
(leaderElection.enabled=false) | monitor (metrics.serviceMonitor.enabled=true and
metrics.podMonitor.enabled=true) | monitor-single (both monitors and singleNamespace=true)
| nopolicy (templatePolicy.level=none) | kueue (kueue.enabled=true,
operator.defaultQueue=training, a GPU quota added and the LocalQueues in team-a and
team-b) | kueue-single (kueue.enabled=true and singleNamespace=true).
Prints one line per check, tab-separated: "ok<TAB>name" or "not ok<TAB>name<TAB>detail".
With OPERATOR_MAIN_C, every flag the Deployment passes must be in the operator's option
table (options.c beside it), and the PodMonitor selects the labels operator/src/desired.h
defines.
"""
import re
import sys

import yaml

# The API requests kubetrain-operator makes (operator/src: informer.c lists and watches
# jobs, pods, services and networkpolicies; controller.c creates pods, services,
# secrets, networkpolicies, podgroups and events, gets podgroups (their owner), deletes
# pods, networkpolicies, podgroups and expired jobs, PATCHes pods (an elastic job's members)
# and podgroups (an elastic job's minCount), PUTs job status, and progress.c PATCHes it;
# owner references with blockOwnerDeletion need update on
# trainingjobs/finalizers), as (group, resource, verb). Secrets: create and nothing else
# (no get, list or watch, anywhere).
OPERATOR_RULES = {
    ("kubetrain.dev", "trainingjobs", v) for v in ("list", "watch", "delete")
} | {
    ("kubetrain.dev", "trainingjobs/status", "update"),
    ("kubetrain.dev", "trainingjobs/status", "patch"),
    ("kubetrain.dev", "trainingjobs/finalizers", "update"),
    ("", "events", "create"),
} | {
    ("", "pods", v) for v in ("list", "watch", "create", "delete", "patch")
} | {
    ("", "services", v) for v in ("list", "watch", "create")
} | {
    ("", "secrets", "create"),
} | {
    ("networking.k8s.io", "networkpolicies", v) for v in ("list", "watch", "create", "delete")
} | {
    ("scheduling.k8s.io", "podgroups", v) for v in ("get", "create", "delete", "patch")
}
# leader.c: GET and PUT the Lease named by --leader-elect-name, POST it when absent.
def lease_rules(name):
    return {
        ("coordination.k8s.io", "leases", "", "create"),
        ("coordination.k8s.io", "leases", name, "get"),
        ("coordination.k8s.io", "leases", name, "update"),
    }
COMMON_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                 "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
                 "app.kubernetes.io/part-of", "app.kubernetes.io/component",
                 "helm.sh/chart")
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "ResourceFlavor", "ClusterQueue",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

results = []


def check(name, cond, detail=""):
    results.append((name, bool(cond), detail))


def flat_rules(role):
    """(group, resource, resourceName, verb) for every grant of a Role or ClusterRole."""
    out = set()
    for r in role.get("rules") or []:
        for g in r.get("apiGroups") or []:
            for res in r.get("resources") or []:
                for v in r.get("verbs") or []:
                    for n in r.get("resourceNames") or [""]:
                        out.add((g, res, n, v))
    return out


def source_rules(src_dir):
    """(group, resource, verb) of every API request in operator/src, read from the code:
    each kclient_request takes the path of the kpath call before it (group version,
    plural, sub-resource); a plural held in a variable is the set of string literals of
    its assignment; the informers' requests (list and watch) are those of each
    informer_new in controller.c with the group version and plural set before it.
    Requests on leases (leader.c) are left to LEASE_RULES."""
    import glob
    import os

    # The Workload API's group versions (desired.h: POD_GROUP_V1BETA1, ...): the operator
    # requests PodGroups in whichever the cluster serves, held in a variable; RBAC names
    # only their group, which they share.
    pod_group_gvs = dict(re.findall(r'#define\s+(POD_GROUP_\w+)\s+"([^"]+)"',
                                    open(os.path.join(src_dir, "desired.h")).read()))
    pod_group_groups = {gv.split("/")[0] for gv in pod_group_gvs.values()}

    def group(gv, plural):
        gv = gv.strip()
        if gv == "KT_API_VERSION":
            return "kubetrain.dev"
        if gv in pod_group_gvs:
            return pod_group_gvs[gv].split("/")[0]
        if re.fullmatch(r"[a-z_]+", gv):  # a variable
            if plural == '"podgroups"' and len(pod_group_groups) == 1:
                return next(iter(pod_group_groups))
            return "?" + gv
        gv = gv.strip('"')
        return "" if gv == "v1" else gv.split("/")[0]

    def plurals(arg, text_before):
        arg = arg.strip()
        if arg == "KT_PLURAL":
            return {"trainingjobs"}
        if arg.startswith('"'):
            return {arg.strip('"')}
        m = list(re.finditer(r"\b" + re.escape(arg) + r"\s*=([^;]*);", text_before))
        return set(re.findall(r'"([a-z]+)"', m[-1].group(1))) if m else {"?" + arg}

    used = set()
    for path in sorted(glob.glob(os.path.join(src_dir, "*.c"))):
        if path.endswith(("kclient.c", "leader.c")):
            continue
        text = open(path).read()
        last = None
        for m in re.finditer(r"\bkpath\(([^;]*?)\);|\bkclient_request\([^,]+,\s*\"([A-Z]+)\"", text):
            if m.group(1) is not None:
                args = [a.strip() for a in m.group(1).split(",")]
                last = (args[2], args[4], args[5], args[6], text[:m.start()])
                continue
            if last is None or last[0] == "inf->group_version":
                continue
            gv, plural, name, sub = last[0], last[1], last[2], last[3]
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
                    "GET": "get" if name != "NULL" else "list"}[m.group(2)]
            for r in plurals(plural, last[4]):
                used.add((group(gv, plural), r + ("/status" if sub == '"status"' else ""), verb))
        # InformerOptions X = {.group_version = ..., .plural = ...}; X.plural = ...;
        # informer_new(client, &X): list and watch with X's fields at that point.
        opts = {}
        for m in re.finditer(r"InformerOptions\s+(\w+)\s*=\s*\{([^;]*)\};|"
                             r"\b(\w+)\.(group_version|plural)\s*=\s*([^;]+);|"
                             r"informer_new\([^,]+,\s*&(\w+)\)", text):
            if m.group(1):
                fields = dict(re.findall(r"\.(\w+)\s*=\s*([^,}]+)", m.group(2)))
                opts[m.group(1)] = {k: v.strip() for k, v in fields.items()}
            elif m.group(3):
                opts.setdefault(m.group(3), {})[m.group(4)] = m.group(5).strip()
            else:
                o = opts.get(m.group(6), {})
                for r in plurals(o.get("plural", "?"), ""):
                    g = group(o.get("group_version", "?"), o.get("plural", "?"))
                    used |= {(g, r, "list"), (g, r, "watch")}
    desired = os.path.join(src_dir, "desired.c")
    if os.path.exists(desired) and "blockOwnerDeletion" in open(desired).read():
        used.add(("kubetrain.dev", "trainingjobs/finalizers", "update"))
    return used


def operator_labels(main_c):
    """The pod labels the operator sets, from operator/src/desired.h beside main_c (the
    #defines LABEL_* and MANAGED_BY), else the names docs/design.md gives."""
    import os
    names = {"LABEL_JOB_NAME": "kubetrain.dev/job-name", "LABEL_ROLE": "kubetrain.dev/role",
             "LABEL_REPLICA_INDEX": "kubetrain.dev/replica-index", "LABEL_CHIEF": "kubetrain.dev/chief",
             "LABEL_MANAGED_BY": "app.kubernetes.io/managed-by", "MANAGED_BY": "kubetrain-operator"}
    h = os.path.join(os.path.dirname(main_c), "desired.h") if main_c else ""
    if h and os.path.exists(h):
        with open(h) as f:
            names.update(re.findall(r'^#define (LABEL_[A-Z_]+|MANAGED_BY) "([^"]*)"', f.read(), re.M))
    return names


def check_pod_monitor(mode, pm, ns, single, main_c):
    """The PodMonitor scrapes the chief of every job (its chief task, else worker 0: the
    trainer that alone serves /metrics) on the port named metrics, in the namespaces the operator watches; and
    examples/job-metrics.yaml declares that port where KUBETRAIN_METRICS_PORT points."""
    import os
    lab = operator_labels(main_c)
    spec = pm.get("spec") or {}
    want_sel = {lab["LABEL_MANAGED_BY"]: lab["MANAGED_BY"], lab["LABEL_CHIEF"]: "true"}
    sel = (spec.get("selector") or {}).get("matchLabels")
    check(f"[{mode}] PodMonitor selects the chief of every job by the operator's labels",
          sel == want_sel, f"selector {sel}, want {want_sel}")
    eps = spec.get("podMetricsEndpoints") or [{}]
    check(f"[{mode}] PodMonitor scrapes port metrics /metrics, the job name as a target label",
          len(eps) == 1 and eps[0].get("port") == "metrics" and eps[0].get("path") == "/metrics"
          and spec.get("podTargetLabels") == [lab["LABEL_JOB_NAME"]], f"{spec}")
    want_ns = {"matchNames": [ns]} if single else {"any": True}
    check(f"[{mode}] PodMonitor looks in the namespaces the operator watches: {want_ns}",
          spec.get("namespaceSelector") == want_ns, f"got {spec.get('namespaceSelector')}")
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                      "job-metrics.yaml")
    try:
        with open(ex) as f:
            job = yaml.safe_load(f)
        cs = job["spec"]["template"]["spec"]["containers"]
        c = [c for c in cs if c.get("name") == "trainer"][0]
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        ok = "KUBETRAIN_METRICS_PORT" in env and ports.get("metrics") == int(env["KUBETRAIN_METRICS_PORT"])
        detail = f"env {env}, ports {ports}"
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as e:
        ok, detail = False, f"{ex}: {e!r}"
    check(f"[{mode}] examples/job-metrics.yaml: the trainer's port metrics is KUBETRAIN_METRICS_PORT",
          ok, detail)


def check_kueue(mode, by_kind, ns):
    """The queues kueue.enabled renders (values.yaml's defaults; in mode kueue also
    nvidia.com/gpu: 2 and LocalQueues in team-a and team-b)."""
    rf, cq = by_kind["ResourceFlavor"], by_kind["ClusterQueue"]
    lqs = by_kind["LocalQueue"]
    check(f"[{mode}] one ResourceFlavor, one ClusterQueue, kueue.x-k8s.io/v1beta2",
          len(rf) == 1 and len(cq) == 1 and all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2"
                                                for d in rf + cq + lqs),
          f"{len(rf)} ResourceFlavor, {len(cq)} ClusterQueue")
    if len(rf) != 1 or len(cq) != 1:
        return
    spec = cq[0]["spec"]
    want_q = {"cpu": "4", "memory": "8Gi"}
    if mode == "kueue":
        want_q["nvidia.com/gpu"] = "2"
    groups = spec.get("resourceGroups") or []
    ok = len(groups) == 1 and sorted(groups[0]["coveredResources"]) == sorted(want_q)
    flavors = groups[0].get("flavors") or [] if groups else []
    ok = ok and len(flavors) == 1 and flavors[0]["name"] == rf[0]["metadata"]["name"]
    got_q = {r["name"]: r["nominalQuota"] for r in flavors[0]["resources"]} if ok else {}
    check(f"[{mode}] ClusterQueue covers exactly the quota's resources {sorted(want_q)} "
          "with the ResourceFlavor's nominal quotas",
          ok and got_q == want_q, f"resourceGroups {groups}")
    check(f"[{mode}] ClusterQueue preemption withinClusterQueue LowerPriority, "
          "BestEffortFIFO, every namespace",
          spec.get("preemption", {}).get("withinClusterQueue") == "LowerPriority"
          and spec.get("queueingStrategy") == "BestEffortFIFO"
          and spec.get("namespaceSelector") == {}, f"spec {spec}")
    want_ns = ["team-a", "team-b"] if mode == "kueue" else [ns]
    got = sorted((d["metadata"].get("namespace"), d["metadata"]["name"],
                  d["spec"].get("clusterQueue")) for d in lqs)
    check(f"[{mode}] LocalQueue training in {', '.join(want_ns)}, on the ClusterQueue",
          got == [(n, "training", cq[0]["metadata"]["name"]) for n in want_ns], f"got {got}")


def main():
    mode, path, release, ns = sys.argv[1:5]
    main_c = sys.argv[5] if len(sys.argv) > 5 else ""
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    kinds = sorted(by_kind)

    leader = mode != "noleader"
    single = mode in ("single", "monitor-single", "kueue-single")
    monitor = mode in ("monitor", "monitor-single")
    want = {"ServiceAccount", "Deployment", "Service"}
    want |= {"Role", "RoleBinding"} if single else {"ClusterRole", "ClusterRoleBinding"}
    if leader:
        want |= {"Role", "RoleBinding"}
    if monitor:
        want |= {"ServiceMonitor", "PodMonitor"}
    kueue = mode in ("kueue", "kueue-single")
    if kueue:
        want |= {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    policy = mode != "nopolicy"
    # The depth limit's policy in every mode (admissionMaxDepth), the template policy's too
    # unless it is off.
    want |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    check(f"[{mode}] kinds rendered: {', '.join(sorted(want))}", set(kinds) == want,
          f"got {kinds}")

    # Labels and namespaces on every object.
    bad = []
    for d in docs:
        md = d["metadata"]
        labels = md.get("labels") or {}
        missing = [k for k in COMMON_LABELS if k not in labels]
        if missing:
            bad.append(f"{d['kind']}/{md['name']}: no {missing}")
        elif labels["app.kubernetes.io/instance"] != release or \
                labels["app.kubernetes.io/name"] != "kubetrain" or \
                labels["app.kubernetes.io/managed-by"] != "Helm":
            bad.append(f"{d['kind']}/{md['name']}: labels {labels}")
        if d["kind"] == "LocalQueue" and mode == "kueue":
            pass  # in the namespaces kueue.localQueue.namespaces lists: checked below
        elif d["kind"] not in CLUSTER_SCOPED and md.get("namespace") != ns:
            bad.append(f"{d['kind']}/{md['name']}: namespace {md.get('namespace')!r}")
        if d["kind"] in CLUSTER_SCOPED and "namespace" in md:
            bad.append(f"{d['kind']}/{md['name']}: cluster-scoped with a namespace")
    check(f"[{mode}] app.kubernetes.io/* labels and namespace {ns} on every object",
          not bad, "\n".join(bad))

    # RBAC: no wildcard anywhere; the operator's role grants exactly its verbs.
    wild = [f"{d['kind']}/{d['metadata']['name']}: {r}"
            for k in ("Role", "ClusterRole") for d in by_kind.get(k, [])
            for r in d.get("rules") or []
            if any("*" in str(x) for key in ("apiGroups", "resources", "verbs",
                                              "resourceNames", "nonResourceURLs")
                   for x in r.get(key) or [])]
    check(f"[{mode}] no wildcard in any RBAC rule", not wild, "\n".join(wild))

    op_kind = "Role" if single else "ClusterRole"
    roles = {d["metadata"]["name"]: d for k in ("Role", "ClusterRole") for d in by_kind.get(k, [])}
    op_roles = [d for d in by_kind.get(op_kind, []) if not d["metadata"]["name"].endswith("-leader-election")]
    le_roles = [d for d in by_kind.get("Role", []) if d["metadata"]["name"].endswith("-leader-election")]
    if len(op_roles) == 1:
        got = flat_rules(op_roles[0])
        want_rules = {(g, r, "", v) for g, r, v in OPERATOR_RULES}
        check(f"[{mode}] {op_kind} grants exactly the operator's verbs", got == want_rules,
              f"extra {sorted(got - want_rules)}; missing {sorted(want_rules - got)}")
    else:
        check(f"[{mode}] one operator {op_kind}", False, f"got {len(op_roles)}")
    if leader:
        # The Lease is named after the release (its fullname; release "kubetrain" of
        # chart "kubetrain" is "kubetrain"), so two releases in a namespace never share it.
        args = by_kind["Deployment"][0]["spec"]["template"]["spec"]["containers"][0].get("args") or []
        names = [a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-name=")]
        fullname = release if "kubetrain" in release else release + "-kubetrain"
        check(f"[{mode}] the Deployment names its Lease after the release", names == [fullname],
              f"got {names}")
        want_le = lease_rules(fullname)
        got = flat_rules(le_roles[0]) if len(le_roles) == 1 else set()
        check(f"[{mode}] leader-election Role grants exactly the Lease verbs", got == want_le,
              f"extra {sorted(got - want_le)}; missing {sorted(want_le - got)}")
    else:
        check(f"[{mode}] no leader-election Role", not le_roles)

    sa = by_kind["ServiceAccount"][0]["metadata"]["name"]
    bad = []
    for k in ("RoleBinding", "ClusterRoleBinding"):
        for b in by_kind.get(k, []):
            ref = b["roleRef"]
            target = roles.get(ref["name"])
            if not target or target["kind"] != ref["kind"]:
                bad.append(f"{k}/{b['metadata']['name']} refers to missing {ref}")
            if b.get("subjects") != [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]:
                bad.append(f"{k}/{b['metadata']['name']} subjects {b.get('subjects')}")
    check(f"[{mode}] bindings tie each role to ServiceAccount {ns}/{sa}", not bad, "\n".join(bad))

    # The Deployment: security context, probes, ports, args.
    dep = by_kind["Deployment"][0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]
    psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}
    facts = {
        "pod runAsNonRoot": psc.get("runAsNonRoot") is True,
        "pod seccompProfile RuntimeDefault": (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
        "readOnlyRootFilesystem": csc.get("readOnlyRootFilesystem") is True,
        "allowPrivilegeEscalation false": csc.get("allowPrivilegeEscalation") is False,
        "capabilities drop [ALL], none added": (csc.get("capabilities") or {}).get("drop") == ["ALL"]
        and not (csc.get("capabilities") or {}).get("add"),
        "not privileged": not csc.get("privileged"),
    }
    check(f"[{mode}] securityContext: " + ", ".join(facts), all(facts.values()),
          "false: " + ", ".join(k for k, v in facts.items() if not v))
    check(f"[{mode}] Deployment runs as ServiceAccount {sa}", spec.get("serviceAccountName") == sa,
          f"got {spec.get('serviceAccountName')}")

    ports = {p["name"]: p["containerPort"] for p in c.get("ports") or []}
    args = c.get("args") or []
    argmap = {}
    for a in args:
        k, _, v = a.partition("=")
        argmap[k] = v
    live, ready = c.get("livenessProbe") or {}, c.get("readinessProbe") or {}
    health_port = argmap.get("--health-addr", "")
    ok = ((live.get("httpGet") or {}).get("path") == "/healthz"
          and (ready.get("httpGet") or {}).get("path") == "/readyz"
          and (live.get("httpGet") or {}).get("port") == "health"
          and (ready.get("httpGet") or {}).get("port") == "health"
          and health_port == f":{ports.get('health')}")
    check(f"[{mode}] liveness /healthz and readiness /readyz on the --health-addr port", ok,
          f"liveness {live}, readiness {ready}, ports {ports}, --health-addr {health_port!r}")

    labels = pod["metadata"].get("labels") or {}
    sel = dep["spec"]["selector"]["matchLabels"]
    check(f"[{mode}] pod template carries the labels and matches the selector",
          all(k in labels for k in COMMON_LABELS) and all(labels.get(k) == v for k, v in sel.items()),
          f"labels {labels}, selector {sel}")

    check(f"[{mode}] operator image kubetrain/operator:<appVersion>, trainer image from values",
          c["image"] == "kubetrain/operator:0.1.0"
          and argmap.get("--trainer-image") == "kubetrain/trainer:0.1.0",
          f"image {c['image']}, --trainer-image {argmap.get('--trainer-image')}")
    if single:
        check(f"[{mode}] --namespace={ns}", argmap.get("--namespace") == ns, f"args {args}")
    else:
        check(f"[{mode}] no --namespace (all namespaces)", "--namespace" not in argmap, f"args {args}")
    if leader:
        check(f"[{mode}] --leader-elect in namespace {ns}, identity from the pod name",
              "--leader-elect" in argmap and argmap.get("--leader-elect-namespace") == ns
              and argmap.get("--leader-elect-id") == "$(POD_NAME)"
              and any(e["name"] == "POD_NAME" for e in c.get("env") or []), f"args {args}")
    else:
        check(f"[{mode}] no --leader-elect", not any(a.startswith("--leader-elect") for a in args),
              f"args {args}")
    if main_c and mode == "default":
        import os
        used = source_rules(os.path.dirname(main_c))
        check("the operator's verbs table matches the API requests in operator/src "
              f"({len(used)} derived from the code)", used == OPERATOR_RULES,
              f"in the code, not the table: {sorted(used - OPERATOR_RULES)}; "
              f"in the table, not the code: {sorted(OPERATOR_RULES - used)}")
    if main_c:
        import os
        # the option table is options.c's, beside main.c
        options_c = os.path.join(os.path.dirname(main_c), "options.c")
        with open(options_c) as f:
            known = set(re.findall(r'\{"([a-z][a-z-]*)",\s*(?:required|no)_argument', f.read()))
        unknown = [k for k in argmap if k[2:] not in known]
        check(f"[{mode}] every flag passed is one the operator has ({options_c})",
              known and not unknown, f"unknown {unknown}; the operator has {sorted(known)}")

    # The template policy: the operator's flag, and the admission policy bound to it.
    level = "baseline" if policy else "none"
    check(f"[{mode}] --template-policy={level}", argmap.get("--template-policy") == level,
          f"args {args}")
    # Keyed by the name's last two words: "template-policy", "depth-limit".
    vaps = {"-".join(v["metadata"]["name"].split("-")[-2:]): v
            for v in by_kind.get("ValidatingAdmissionPolicy", [])}
    vbs = {v["spec"]["policyName"]: v for v in by_kind.get("ValidatingAdmissionPolicyBinding", [])}
    check(f"[{mode}] admission policies: " + ", ".join(sorted(vaps)),
          set(vaps) == ({"template-policy", "depth-limit"} if policy else {"depth-limit"}),
          f"{sorted(vaps)}")
    want_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}} \
        if single else None
    for what, vap in sorted(vaps.items()):
        vb = vbs.get(vap["metadata"]["name"], {"spec": {}})
        rules = vap["spec"]["matchConstraints"]["resourceRules"]
        ok = (vb["spec"].get("validationActions") == ["Deny"]
              and vap["spec"]["failurePolicy"] == "Fail"
              and rules == [{"apiGroups": ["kubetrain.dev"], "apiVersions": ["v1alpha1"],
                             "operations": ["CREATE", "UPDATE"], "resources": ["trainingjobs"]}]
              and vb["spec"].get("matchResources") == want_ns)
        check(f"[{mode}] ValidatingAdmissionPolicy {what}: TrainingJob create/update, Deny, bound"
              + (f" in {ns} only" if single else ""), ok, f"{vap['spec'].get('matchConstraints')} {vb['spec']}")
    if policy:
        vap = vaps["template-policy"]
        msgs = [v.get("message") or v.get("messageExpression") or "" for v in vap["spec"]["validations"]]
        roles = ("spec.template.", "spec.chief.template.", "spec.ps.template.",
                 "spec.evaluator.template.")
        check(f"[{mode}] every admission rule's message names a template's field first, "
              f"each of {len(roles)} templates with the same rules ({len(msgs)} rules)",
              len(msgs) >= 4 * 21 and all(any(r in m for r in roles) for m in msgs)
              and len({sum(r in m for m in msgs) for r in roles}) == 1, f"{msgs}")
    depth = vaps["depth-limit"]["spec"]["validations"]
    check(f"[{mode}] the depth limit refuses a value 32 levels below spec",
          len(depth) == 1 and depth[0]["message"].startswith("spec: a value 32 levels below spec")
          and depth[0]["expression"].count(".exists(") == 33, f"{depth}")

    svc = by_kind["Service"][0]
    sp = svc["spec"]["ports"][0]
    check(f"[{mode}] metrics Service selects the operator pod on port metrics",
          svc["spec"]["selector"] == sel and sp["targetPort"] == "metrics"
          and argmap.get("--metrics-addr") == f":{ports.get('metrics')}",
          f"selector {svc['spec']['selector']}, port {sp}, --metrics-addr {argmap.get('--metrics-addr')}")
    if monitor:
        sm = by_kind["ServiceMonitor"][0]
        smsel = sm["spec"]["selector"]["matchLabels"]
        svcl = svc["metadata"]["labels"]
        check(f"[{mode}] ServiceMonitor selects the metrics Service, endpoint port metrics /metrics",
              all(svcl.get(k) == v for k, v in smsel.items())
              and sm["spec"]["endpoints"][0]["port"] == "metrics"
              and sm["spec"]["endpoints"][0]["path"] == "/metrics", f"{sm['spec']}")
        check_pod_monitor(mode, by_kind["PodMonitor"][0], ns, single, main_c)

    if kueue:
        check_kueue(mode, by_kind, ns)
    want_dq = "training" if mode == "kueue" else None
    check(f"[{mode}] --default-queue={want_dq}" if want_dq else f"[{mode}] no --default-queue",
          argmap.get("--default-queue") == want_dq, f"args {args}")

    for name, ok, detail in results:
        detail = str(detail).replace("\n", "\\n").replace("\t", " ")
        print(f"ok\t{name}" if ok else f"not ok\t{name}\t{detail}")


if __name__ == "__main__":
    main()
