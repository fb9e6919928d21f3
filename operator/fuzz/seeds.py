#!/usr/bin/env python3
"""Writes the operator's fuzz seeds into OUT/<target>/: the example TrainingJobs, the
kubeconfig forms of the unit tests, watch streams, list answers and observed pods with
termination messages. Usage: seeds.py OUT"""
import glob
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


KUBECONFIGS = [
    "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n"
    "- name: one\n  cluster: {server: 'https://one:6443'}\n"
    "- name: two\n  cluster:\n    server: https://two:6443/\n"
    "    certificate-authority-data: aGVsbG8tY2E=\n"
    "contexts:\n- name: a\n  context: {cluster: one, user: u1}\n"
    "- name: b\n  context: {cluster: two, user: u2, namespace: team}\n"
    "users:\n- name: u1\n  user: {token: t1}\n"
    "- name: u2\n  user:\n    client-certificate-data: aGVsbG8t\n      Y2VydA==\n"
    "    client-key: keys/u2.key\n",
    "current-context: c\nclusters: [{name: c, cluster: {server: 'https://h:1', "
    "certificate-authority: ca.crt}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    "users: [{name: u, user: {tokenFile: /var/run/token}}]\n",
    "current-context: x\nclusters: [{name: k, cluster: {server: 'http://127.0.0.1:8080'}}]\n"
    "contexts: [{name: x, context: {cluster: k, user: e}}]\n"
    "users:\n- name: e\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
    "      command: /usr/bin/get-token\n      args: [--cluster, k]\n"
    "      env: [{name: A, value: b}]\n",
    "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\n",
]


def jobs():
    """The examples' TrainingJobs as JSON objects, with metadata the API server adds."""
    out = []
    try:
        import yaml
    except ImportError:
        yaml = None
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        if yaml is None:
            break
        for doc in yaml.safe_load_all(open(path)):
            if doc and doc.get("kind") == "TrainingJob":
                doc["metadata"].update(namespace="default", uid="uid-1", generation=1,
                                       resourceVersion="100")
                out.append(doc)
    out.append({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "inline", "namespace": "ns", "uid": "u"},
                "spec": {"workers": 3, "port": 2300, "collective": "ring",
                         "model": {"layers": [{"type": "Flatten"},
                                              {"type": "Dense", "units": 10}]},
                         "training": {"epochs": 1, "seed": 7, "optimizer": "adam"},
                         "runPolicy": {"restartPolicy": "ExitCode", "backoffLimit": 2,
                                       "activeDeadlineSeconds": 60,
                                       "ttlSecondsAfterFinished": 5,
                                       "cleanPodPolicy": "All", "suspend": False},
                         "successPolicy": "AllWorkers",
                         "template": {"metadata": {"labels": {"a": "b"}},
                                      "spec": {"nodeSelector": {"gpu": "yes"},
                                               "containers": [{"name": "trainer",
                                                               "env": [{"name": "X",
                                                                        "value": "1"}]}]}}}})
    return out


def pod(job, i, phase, code=None, message=None):
    name = job["metadata"]["name"]
    p = {"metadata": {"name": "%s-worker-%d" % (name, i),
                      "labels": {"kubetrain.dev/job-name": name,
                                 "kubetrain.dev/replica-index": str(i)},
                      "annotations": {"kubetrain.dev/attempt": "0",
                                      "kubetrain.dev/world-size": "2"},
                      "ownerReferences": [{"uid": job["metadata"]["uid"], "controller": True}]},
         "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}
    if code is not None:
        t = {"exitCode": code}
        if message is not None:
            t["message"] = message
        p["status"]["containerStatuses"] = [{"name": "trainer", "state": {"terminated": t}}]
    return p


def main():
    out = sys.argv[1]
    for i, k in enumerate(KUBECONFIGS):
        write(out, "kcfg", "kubeconfig-%d" % i, k)
        write(out, "yamljson", "kubeconfig-%d" % i, k)
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        write(out, "yamljson", os.path.basename(path), open(path).read())
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "tfjob", "*.yaml"))):
        write(out, "tfjob", os.path.basename(path), open(path).read())

    js = jobs()
    for i, j in enumerate(js):
        write(out, "jobspec", "job-%d.json" % i, json.dumps(j))

    # Watch streams: chunk size byte, then newline-delimited events.
    events = [{"type": "ADDED", "object": js[0]},
              {"type": "MODIFIED", "object": dict(js[0], status={"phase": "Running"})},
              {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "200"}}},
              {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
              {"type": "DELETED", "object": js[-1]}]
    body = "".join(json.dumps(e) + "\n" for e in events)
    write(out, "watch", "events", b"\x07" + body.encode())
    write(out, "watch", "crlf-partial", b"\x00" + body.replace("\n", "\r\n").encode()[:-40])

    # List answers: chunk size byte, then the body (a page with a continue token, the
    # last page, an empty list).
    page = {"kind": "TrainingJobList", "apiVersion": "kubetrain.dev/v1alpha1",
            "metadata": {"resourceVersion": "300", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
            "items": js}
    write(out, "list", "page", b"\x05" + json.dumps(page).encode())
    write(out, "list", "last-page", b"\x00" + json.dumps(
        {"kind": "List", "metadata": {"resourceVersion": "301"}, "items": js[:1]}).encode())
    write(out, "list", "empty", b"\x02" + b'{"metadata":{"resourceVersion":"7"},"items":[]}')

    job = js[0]
    ok = json.dumps({"weights_sha256": "ab" * 32, "final_loss": 0.31, "accuracy": 0.88,
                     "global_step": 210})
    cases = {
        "new": {"job": job},
        "running": {"job": dict(job, status={"phase": "Running", "attempt": 0, "launched": True}),
                    "pods": [pod(job, 0, "Running"), pod(job, 1, "Running")]},
        "chief-succeeded": {"job": dict(job, status={"phase": "Running", "attempt": 0}),
                            "pods": [pod(job, 0, "Succeeded", 0, ok), pod(job, 1, "Running")]},
        "failed-message": {"job": dict(job, status={"phase": "Running", "attempt": 0}),
                           "pods": [pod(job, 0, "Failed", 3,
                                        json.dumps({"error": "data: bad IDX magic\nline 2"})),
                                    pod(job, 1, "Failed", 75, "not json")]},
        "inline": {"job": js[-1], "pods": [pod(js[-1], 2, "Failed", 137)], "now": 1800000100},
    }
    # Regression: 2300 workers (over the CRD's 1024) took 26 s of CPU to reconcile.
    cases["regress-2300-workers"] = {"job": dict(job, spec=dict(job["spec"], workers=2300))}
    for name, c in cases.items():
        write(out, "reconcile", name + ".json", json.dumps(c))


if __name__ == "__main__":
    main()
