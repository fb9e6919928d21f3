#!/usr/bin/env python3
"""The chart's PodMonitor and ServiceMonitor as prometheus-operator sees them; helper of
charts/tests/test-chart.sh. Prints one line per check, "ok\tNAME" or "not ok\tNAME\tDETAIL"
(DETAIL with \\n for newlines), except where a subcommand says otherwise.

  extract RENDER                the PodMonitor and ServiceMonitor documents of a helm
                                template output, as YAML (stdout), nothing else
  broken RENDER DIR             DIR/broken-CASE.yaml: the rendered PodMonitor or
                                ServiceMonitor, renamed -broken-CASE, with one mistake (BROKEN);
                                prints "FILE\tFIELD\tWHAT" for each, FIELD the path the
                                API server's refusal must name
  stored MODE RENDER STORED     every field the chart set is in the objects the API server
                                stored (STORED: kubectl get -o json), none pruned or changed
  scrape MODE RENDER CONFIG NS MAIN_C
                                CONFIG (the prometheus.yaml prometheus-operator generated)
                                has one scrape job per monitor of RENDER; its relabelings,
                                applied to Kubernetes pod-discovery targets made from the
                                labels operator/src/desired.h defines (MAIN_C's directory),
                                keep exactly the chief's `metrics` port, with the job name
                                as a label; the ServiceMonitor's, applied to endpoints-
                                discovery targets, exactly the operator's metrics Service
"""
import hashlib
import json
import re
import sys

import yaml

BROKEN = {
    # case: (kind, the mistake, the field the API server must name refusing it)
    "port-int": ("PodMonitor", "podMetricsEndpoints[0].port an integer",
                 "spec.podMetricsEndpoints[0].port"),
    "scheme-enum": ("PodMonitor", "podMetricsEndpoints[0].scheme outside its enum",
                    "spec.podMetricsEndpoints[0].scheme"),
    "unknown-field": ("PodMonitor", "a misspelt field (podTargetLabel)",
                      "spec.podTargetLabel"),
    "interval-pattern": ("ServiceMonitor", "an endpoints[0].interval that is not a duration",
                         "spec.endpoints[0].interval"),
}


def out(ok, name, detail=""):
    if ok:
        print(f"ok\t{name}")
    else:
        print(f"not ok\t{name}\t{str(detail).replace(chr(10), chr(92) + 'n')}")


def monitors(render):
    with open(render) as f:
        return [d for d in yaml.safe_load_all(f) if d and d.get("kind") in ("PodMonitor", "ServiceMonitor")]


def cmd_extract(render):
    docs = monitors(render)
    if len(docs) != 2:
        sys.exit(f"{render}: want one PodMonitor and one ServiceMonitor, found {len(docs)} monitors")
    yaml.safe_dump_all(docs, sys.stdout)


def cmd_broken(render, outdir):
    for case, (kind, what, field) in BROKEN.items():
        doc = next(d for d in monitors(render) if d["kind"] == kind)
        doc["metadata"]["name"] += f"-broken-{case}"
        spec = doc["spec"]
        if case == "port-int":
            spec["podMetricsEndpoints"][0]["port"] = 9090
        elif case == "scheme-enum":
            spec["podMetricsEndpoints"][0]["scheme"] = "htp"
        elif case == "unknown-field":
            spec["podTargetLabel"] = spec.pop("podTargetLabels")
        elif case == "interval-pattern":
            spec["endpoints"][0]["interval"] = "30 seconds"
        path = f"{outdir}/broken-{case}.yaml"
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
        print(f"{path}\t{field}\t{kind} with {what}")


def missing(want, got, path="spec"):
    """The paths of WANT (the rendered fields) that GOT (the stored object) lacks or
    changed; GOT may hold more (defaults)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r}, want a map"]
        res = []
        for k, v in want.items():
            if k not in got:
                res.append(f"{path}.{k}: pruned")
            else:
                res += missing(v, got[k], f"{path}.{k}")
        return res
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r}, want {want!r}"]
        res = []
        for i, (w, g) in enumerate(zip(want, got)):
            res += missing(w, g, f"{path}[{i}]")
        return res
    return [] if want == got else [f"{path}: {got!r}, want {want!r}"]


def cmd_stored(mode, render, stored):
    with open(stored) as f:
        items = json.load(f).get("items", [])
    for doc in monitors(render):
        kind, name = doc["kind"], doc["metadata"]["name"]
        got = next((i for i in items if i["kind"] == kind and i["metadata"]["name"] == name), None)
        if got is None:
            out(False, f"[{mode}] the API server stored {kind} {name}", "not found")
            continue
        lost = missing(doc["spec"], got.get("spec"))
        lost += missing(doc["metadata"]["labels"], got["metadata"].get("labels"), "metadata.labels")
        out(not lost, f"[{mode}] the stored {kind} {name} holds every field the chart set",
            "\n".join(lost))


# --- Prometheus's relabeling, as its documentation defines it -------------------------------

def expand(template, m):
    """A replacement's $1, ${1}, $name and ${name} from match M; $$ is a dollar."""
    def sub(t):
        g = t.group(1) or t.group(2)
        if g == "$":
            return "$"
        try:
            return m.group(int(g) if g.isdigit() else g) or ""
        except (IndexError, re.error):
            return ""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+|\$))", sub, template)


def relabel(labels, rules):
    """LABELS after RULES (a scrape config's relabel_configs), or None when dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace").lower()
        regex = re.compile("^(?:" + str(r.get("regex", "(.*)")) + ")$")
        sep = r.get("separator", ";")
        value = sep.join(labels.get(s, "") for s in r.get("source_labels", []))
        repl = str(r.get("replacement", "$1"))
        target = r.get("target_label")
        if action == "keep":
            if not regex.match(value):
                return None
        elif action == "drop":
            if regex.match(value):
                return None
        elif action == "keepequal":
            if value != labels.get(target, ""):
                return None
        elif action == "dropequal":
            if value == labels.get(target, ""):
                return None
        elif action in ("replace", "lowercase", "uppercase", "hashmod") and not target:
            raise ValueError(f"relabel action {action} without target_label: {r}")
        elif action == "replace":
            m = regex.match(value)
            if m:
                name = expand(target, m)
                v = expand(repl, m)
                if v == "":
                    labels.pop(name, None)
                else:
                    labels[name] = v
        elif action in ("lowercase", "uppercase"):
            labels[target] = value.lower() if action == "lowercase" else value.upper()
        elif action == "hashmod":
            h = int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big")
            labels[target] = str(h % int(r["modulus"]))
        elif action == "labelmap":
            for k in list(labels):
                m = regex.match(k)
                if m:
                    labels[expand(repl, m)] = labels[k]
        elif action == "labeldrop":
            labels = {k: v for k, v in labels.items() if not regex.match(k)}
        elif action == "labelkeep":
            labels = {k: v for k, v in labels.items() if regex.match(k)}
        else:
            raise ValueError(f"relabel action {action!r} is not modelled here")
    return labels


def meta(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_target(ns, pod, labels, port_name, port, container="trainer"):
    """The labels Kubernetes pod discovery gives one container port of a running pod."""
    t = {"__address__": f"10.244.0.7:{port}", "__meta_kubernetes_namespace": ns,
         "__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_ip": "10.244.0.7",
         "__meta_kubernetes_pod_container_name": container,
         "__meta_kubernetes_pod_container_init": "false",
         "__meta_kubernetes_pod_container_port_name": port_name,
         "__meta_kubernetes_pod_container_port_number": str(port),
         "__meta_kubernetes_pod_container_port_protocol": "TCP",
         "__meta_kubernetes_pod_ready": "true", "__meta_kubernetes_pod_phase": "Running",
         "__meta_kubernetes_pod_node_name": "node-1", "__meta_kubernetes_pod_host_ip": "10.0.0.1",
         "__meta_kubernetes_pod_uid": hashlib.md5(pod.encode()).hexdigest()}
    for k, v in labels.items():
        t["__meta_kubernetes_pod_label_" + meta(k)] = v
        t["__meta_kubernetes_pod_labelpresent_" + meta(k)] = "true"
    return t


def endpoints_target(ns, service, labels, port_name, port):
    """The labels Kubernetes endpoints discovery gives one port of a Service's ready
    endpoint, a pod of that Service."""
    t = {"__address__": f"10.244.0.9:{port}", "__meta_kubernetes_namespace": ns,
         "__meta_kubernetes_service_name": service, "__meta_kubernetes_endpoints_name": service,
         "__meta_kubernetes_endpoint_port_name": port_name,
         "__meta_kubernetes_endpoint_port_protocol": "TCP",
         "__meta_kubernetes_endpoint_ready": "true",
         "__meta_kubernetes_endpoint_address_target_kind": "Pod",
         "__meta_kubernetes_endpoint_address_target_name": service + "-pod",
         "__meta_kubernetes_pod_name": service + "-pod", "__meta_kubernetes_pod_phase": "Running",
         "__meta_kubernetes_pod_container_name": "operator"}
    for k, v in labels.items():
        t["__meta_kubernetes_service_label_" + meta(k)] = v
        t["__meta_kubernetes_service_labelpresent_" + meta(k)] = "true"
    return t


def run_targets(job, targets, check_kept):
    """Relabels each (what, labels, kept?) of TARGETS under JOB; the mismatches, and
    CHECK_KEPT(what, labels) for each target kept as it should be."""
    # $(SHARD) is filled in by prometheus-config-reloader; one shard is shard 0.
    rules = json.loads(json.dumps(job.get("relabel_configs") or []).replace("$(SHARD)", "0"))
    bad = []
    try:
        for what, t, want in targets:
            got = None
            if t is not None:  # None: outside the namespaces discovery looks in
                t = dict(t, **scrape_defaults(job))
                got = relabel(t, rules)
            if (got is not None) != want:
                bad.append(f"{what}: {'kept' if got is not None else 'dropped'}, want "
                           f"{'kept' if want else 'dropped'}")
            elif got is not None:
                bad += check_kept(what, got)
    except ValueError as e:
        bad.append(str(e))
    return bad + ([f"relabel_configs: {json.dumps(rules)}"] if bad else [])


def scrape_defaults(job):
    """The labels Prometheus adds to each target before relabeling."""
    return {"job": job["job_name"], "__metrics_path__": job.get("metrics_path", "/metrics"),
            "__scheme__": job.get("scheme", "http"),
            "__scrape_interval__": job.get("scrape_interval", "1m"),
            "__scrape_timeout__": job.get("scrape_timeout", "10s")}


def operator_labels(main_c):
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location(
        "check_render", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-render.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.operator_labels(main_c)


def cmd_scrape(mode, render, config, ns, main_c):
    with open(config) as f:
        cfg = yaml.safe_load(f)
    jobs = {j["job_name"]: j for j in cfg.get("scrape_configs") or []}
    docs = {d["kind"]: d for d in monitors(render)}
    pm, sm = docs["PodMonitor"], docs["ServiceMonitor"]
    pm_job = f"podMonitor/{ns}/{pm['metadata']['name']}/0"
    sm_job = f"serviceMonitor/{ns}/{sm['metadata']['name']}/0"
    out(pm_job in jobs and sm_job in jobs,
        f"[{mode}] prometheus-operator made scrape jobs {pm_job} and {sm_job}",
        f"jobs: {sorted(jobs)}")
    if pm_job not in jobs:
        return
    job = jobs[pm_job]
    sds = job.get("kubernetes_sd_configs") or [{}]
    roles = [sd.get("role") for sd in sds]
    names = [(sd.get("namespaces") or {}).get("names") for sd in sds]
    want_names = [[ns]] if mode == "monitor-single" else [None]
    out(roles == ["pod"] and names == want_names,
        f"[{mode}] the PodMonitor's job discovers pods in "
        + ("its release namespace" if mode == "monitor-single" else "every namespace"),
        f"kubernetes_sd_configs: {sds}")
    want_path = pm["spec"]["podMetricsEndpoints"][0]["path"]
    want_int = pm["spec"]["podMetricsEndpoints"][0]["interval"]
    out(job.get("metrics_path") == want_path and job.get("scrape_interval") == want_int,
        f"[{mode}] the PodMonitor's job scrapes {want_path} every {want_int}",
        f"metrics_path {job.get('metrics_path')!r}, scrape_interval {job.get('scrape_interval')!r}")

    lab = operator_labels(main_c)
    sel = pm["spec"]["selector"]["matchLabels"]
    chief = {lab["LABEL_MANAGED_BY"]: lab["MANAGED_BY"], lab["LABEL_JOB_NAME"]: "mnist",
             lab["LABEL_ROLE"]: "worker", lab["LABEL_REPLICA_INDEX"]: "0", lab["LABEL_CHIEF"]: "true"}
    worker = {k: v for k, v in chief.items() if k != lab["LABEL_CHIEF"]}
    worker1 = dict(worker, **{lab["LABEL_REPLICA_INDEX"]: "1"})
    # A job with a chief task: the chief pod serves /metrics, its worker 0 does not.
    chief_task = dict(chief, **{lab["LABEL_ROLE"]: "chief"})
    stranger = {k: v for k, v in chief.items() if k != lab["LABEL_MANAGED_BY"]}
    other_ns = "team-b" if ns != "team-b" else "team-c"
    sd_names = want_names[0]

    def pod(what, tns, labels, pname, port, want):
        seen = sd_names is None or tns in sd_names
        t = pod_target(tns, "mnist-worker-" + labels[lab["LABEL_REPLICA_INDEX"]], labels, pname, port)
        return (what, t if seen else None, want)

    def pod_kept(what, got):
        if got.get(meta(lab["LABEL_JOB_NAME"])) == "mnist" and got.get("namespace") in (ns, other_ns) \
                and got.get("__address__") == "10.244.0.7:9090":
            return []
        return [f"{what}: labels {json.dumps({k: v for k, v in got.items() if not k.startswith('__meta')})}"]

    bad = run_targets(job, [
        pod("the chief's metrics port", ns, chief, "metrics", 9090, True),
        pod("the chief's metrics port in another namespace", other_ns, chief, "metrics", 9090,
            mode != "monitor-single"),
        pod("the chief's collective port", ns, chief, "collective", 2222, False),
        pod("worker 1's metrics port", ns, worker1, "metrics", 9090, False),
        pod("the chief task's metrics port (a job with a chief)", ns, chief_task, "metrics", 9090,
            True),
        pod("worker 0's metrics port in a job with a chief", ns, worker, "metrics", 9090, False),
        pod("a pod not made by the operator", ns, stranger, "metrics", 9090, False),
    ], pod_kept)
    out(not bad, f"[{mode}] its relabelings keep the chief's metrics port only "
        f"(selector {','.join(f'{k}={v}' for k, v in sel.items())}), "
        f"labelled {meta(lab['LABEL_JOB_NAME'])}", "\n".join(bad))

    # The ServiceMonitor: the operator's metrics Service, in the release namespace.
    if sm_job not in jobs:
        return
    job = jobs[sm_job]
    with open(render) as f:
        svc = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "Service"
                   and any(p.get("name") == "metrics" for p in d["spec"].get("ports", [])))
    sds = job.get("kubernetes_sd_configs") or [{}]
    sd_ok = [sd.get("role") for sd in sds] == ["endpoints"] and \
        [(sd.get("namespaces") or {}).get("names") for sd in sds] == [[ns]]
    other = dict(svc["metadata"]["labels"], **{"app.kubernetes.io/instance": "other"})
    name = svc["metadata"]["name"]

    def svc_kept(what, got):
        if got.get("job") == name and got.get("namespace") == ns and got.get("__address__") == "10.244.0.9:8080":
            return []
        return [f"{what}: labels {json.dumps({k: v for k, v in got.items() if not k.startswith('__meta')})}"]

    bad = [] if sd_ok else [f"kubernetes_sd_configs: {sds}, want role endpoints in [{ns}]"]
    bad += run_targets(job, [
        (f"Service {name}'s metrics port", endpoints_target(ns, name, svc["metadata"]["labels"], "metrics", 8080), True),
        (f"Service {name}'s port health", endpoints_target(ns, name, svc["metadata"]["labels"], "health", 8081), False),
        ("another release's metrics Service", endpoints_target(ns, "other-metrics", other, "metrics", 8080), False),
        ("a job's worker Service", endpoints_target(ns, "mnist-worker", chief, "metrics", 9090), False),
    ], svc_kept)
    out(not bad, f"[{mode}] the ServiceMonitor's job keeps Service {name}'s metrics port in {ns} only",
        "\n".join(bad))


def main():
    a = sys.argv[1:]
    if a[:1] == ["extract"] and len(a) == 2:
        cmd_extract(a[1])
    elif a[:1] == ["broken"] and len(a) == 3:
        cmd_broken(a[1], a[2])
    elif a[:1] == ["stored"] and len(a) == 4:
        cmd_stored(*a[1:])
    elif a[:1] == ["scrape"] and len(a) == 6:
        cmd_scrape(*a[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
