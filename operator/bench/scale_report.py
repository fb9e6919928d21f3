#!/usr/bin/env python3
"""Writes bench/results/operator-scale.json from the runs of operator/bench/scale.sh:
scale_report.py OUT PEER-NOTE KF-VERSION KWOK-VERSION K8S-VERSION RUN.json..."""
import datetime, json, os, platform, subprocess, sys
out, note, kfv, kwokv, k8sv, *files = sys.argv[1:]
runs = [json.load(open(f)) for f in files]


def tree():
    """The commit the operator was built from, with "-dirty" when operator/src differs."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "operator/src"]).returncode
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"



cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
doc = {
    "benchmark": "operator at scale: jobs x workers on kwok's simulated nodes (e2e/cluster/kwok-up.sh) "
                 "against kube-apiserver %s (e2e/cluster/up.sh api), kwok %s" % (k8sv, kwokv),
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu,
                "note": "2 cores shared with other jobs; etcd, the apiserver, kube-scheduler, kwok, "
                        "the bench client and the operator run on the same cores"},
    "definitions": {
        "pods_s": "first job created -> last pod ADDED on a watch",
        "bound_s": "max(0, requests - burst) / qps, requests being the operator's until then",
        "pods_over_bound": "pods_s / bound_s (target <= 1.10)",
        "running_s": "first job created -> every pod Running (kwok) and every job status reflecting it",
        "steady": "a quiet window: status writes the apiserver answered, job MODIFIED events (a write "
                  "that changes nothing makes none), the operator's requests",
        "event_to_action_ms": "with every pod present: a pod status write (one worker Pending, then "
                              "Running again) answered -> the watch event with the job status that "
                              "reflects it",
        "restart": "operator SIGKILLed, one worker of each of `jobs_changed_while_down` jobs made "
                   "Pending, operator started again: resync_s = start -> every one of those statuses "
                   "current; requests it issued; pods created/deleted meanwhile (target 0)",
        "vmhwm_mib": "peak RSS of the first operator process; restart.vmhwm_mib the restarted one's",
        "cpu_s": "user+system CPU of the first process from the first job to the end of the event phase",
        "operator_requests_per_job": "the first process's API requests (watches excluded) / jobs",
    },
    "kubetrain_tree": tree(),
    "peer": {"name": "kubeflow/training-operator", "version": kfv, "built": not note,
             "note": note or "the binary make bench-operator builds (go install, GOMAXPROCS=2)"},
    "targets": {"pods_over_bound": 1.10, "vmhwm_mib": 32, "event_to_action_p99_ms": 100,
                "restart_resync_s": 30, "restart_pods_recreated": 0,
                "steady_status_writes_per_job_per_min": 0},
    "runs": runs,
}
json.dump(doc, open(out, "w"), indent=2)
open(out, "a").write("\n")
print(json.dumps(doc, indent=2))
