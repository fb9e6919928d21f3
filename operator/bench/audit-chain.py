#!/usr/bin/env python3
"""audit-chain.py AUDIT_LOG RUNS_TSV NAMESPACE: where a job's start-up goes, from the API
server's audit log (e2e/cluster/up.sh with KT_AUDIT=on) of a gang-kueue.sh run.

For each job of RUNS_TSV (columns mode, run, name, t0, seconds: the apply's start in epoch
seconds and apply -> both workers past rendezvous), the writes to the job's objects in
NAMESPACE (the TrainingJob, its pods and their bindings, its PodGroup, its Kueue Workload)
that the API server received between the apply and the rendezvous, in order. Each write is
a step named by who made it (the user agent's program, or the user for the kubelet and
the scheduler), the verb, the resource and the object (the job's name taken off; a
Workload is "workload", a PodGroup "podgroup"), numbered when the same step comes again.
Prints JSON: per mode, every step seen in at least half of its runs, with the medians over
runs of when the API server received it and answered it (ms after it received the
TrainingJob's create) and how long it took, in order of the median received time; and
one example run per mode, step by step."""
import collections
import csv
import datetime
import json
import statistics
import sys


def epoch(ts):
    # RFC 3339 with microseconds and Z
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def actor(ev):
    user = ev.get("user", {}).get("username", "")
    if user.startswith("system:node:"):
        return "kubelet"
    if user == "system:kube-scheduler":
        return "kube-scheduler"
    if user.startswith("system:serviceaccount:kube-system:") or \
            user == "system:kube-controller-manager":
        return "kube-controller-manager"
    agent = ev.get("userAgent", "?").split("/")[0].split(" ")[0]
    return "operator" if agent.startswith("kubetrain") else agent


def step_name(ev, job):
    ref = ev["objectRef"]
    res = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
    name = ref.get("name", "")
    if ref["resource"] == "workloads":
        obj = "workload"
    elif ref["resource"] == "podgroups":
        obj = "podgroup"
    elif ref["resource"] == "trainingjobs":
        obj = "job"
    else:
        obj = name[len(job) + 1:] if name.startswith(job + "-") else name
    return f"{actor(ev)} {ev['verb']} {res} {obj}"


def main():
    log, tsv, ns = sys.argv[1:4]
    events = []
    for line in open(log):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        ref = ev.get("objectRef") or {}
        if ev.get("stage") != "ResponseComplete" or ref.get("namespace") != ns:
            continue
        ev["rx"] = epoch(ev["requestReceivedTimestamp"])  # parsed once, read per job
        ev["done"] = epoch(ev["stageTimestamp"])
        events.append(ev)
    rows = [r for r in csv.DictReader(open(tsv), delimiter="\t") if r["seconds"] != "null"]
    per_mode = collections.defaultdict(list)  # mode -> [ [step dicts], ... ]
    for r in rows:
        job, t0, end = r["name"], float(r["t0"]), float(r["t0"]) + float(r["seconds"])
        mine = [e for e in events
                if (e["objectRef"].get("name", "") == job or
                    e["objectRef"].get("name", "").startswith(job + "-"))
                and t0 <= e["rx"] <= end]
        mine.sort(key=lambda e: e["rx"])
        create = next((e for e in mine if e["objectRef"]["resource"] == "trainingjobs"
                       and e["verb"] in ("create", "patch")
                       and not e["objectRef"].get("subresource")), None)
        if create is None:
            continue
        base = create["rx"]
        seen = collections.Counter()
        steps = []
        for e in mine:
            s = step_name(e, job)
            seen[s] += 1
            if seen[s] > 1:
                s += f" #{seen[s]}"
            rx, done = e["rx"], e["done"]
            steps.append({"step": s, "received_ms": round((rx - base) * 1000, 1),
                          "answered_ms": round((done - base) * 1000, 1),
                          "took_ms": round((done - rx) * 1000, 1),
                          "code": e.get("responseStatus", {}).get("code")})
        per_mode[r["mode"]].append({"job": job, "apply_to_create_ms":
                                    round((base - t0) * 1000, 1), "steps": steps})
    out = {}
    for mode, runs in per_mode.items():
        by = collections.defaultdict(list)
        for run in runs:
            for s in run["steps"]:
                by[s["step"]].append(s)
        med = lambda v: round(statistics.median(v), 1)
        steps = [{"step": k, "runs": len(v),
                  "received_ms": med([s["received_ms"] for s in v]),
                  "answered_ms": med([s["answered_ms"] for s in v]),
                  "took_ms": med([s["took_ms"] for s in v])}
                 for k, v in by.items() if len(v) * 2 >= len(runs)]
        steps.sort(key=lambda s: s["received_ms"])
        example = runs[len(runs) // 2]
        out[mode] = {"runs": len(runs),
                     "apply_to_create_ms": med([r["apply_to_create_ms"] for r in runs]),
                     "steps": steps, "example": example}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
