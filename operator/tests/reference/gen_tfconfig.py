#!/usr/bin/env python3
"""Generates operator/tests/reference/tfconfig-roles.json: for each combination of roles
kubetrain will run (issue 24: a user's TensorFlow program as chief, worker, ps and
evaluator pods), the TF_CONFIG each pod gets and what TensorFlow's own
tf.distribute.cluster_resolver.TFConfigClusterResolver makes of it: task type and index,
cluster spec, rpc layer and the task's master address, and whether TensorFlow's
multi_worker_util.is_chief calls the task the chief. The operator's unit tests compare
desired.c's TF_CONFIG with the `tf_config` objects (as JSON values, not text).

Pods are `<job>-<role>-<i>`, all under the headless Service `<job>-worker`, so a peer is
`<job>-<role>-<i>.<job>-worker.<namespace>.svc[.<cluster domain>]:<port>`. The cluster
lists chief, worker and ps tasks; an evaluator is never in it (it trains nothing and
talks to no task) but gets the same cluster with task type "evaluator".

Run: $KT_CACHE/venv-tf/bin/python operator/tests/reference/gen_tfconfig.py [OUT]
(`make reference-tfconfig`; commit the result)."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
from tensorflow.python.distribute import multi_worker_util  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfconfig-roles.json")
CLUSTER_ROLES = ("chief", "worker", "ps")
ROLES = CLUSTER_ROLES + ("evaluator",)

# name, job, namespace, port, cluster domain, replicas per role.
CASES = [
    ("workers", "mnist", "default", 2222, "", {"worker": 2}),
    ("chief-workers", "mnist", "default", 2222, "", {"chief": 1, "worker": 2}),
    ("chief-workers-ps", "mnist", "default", 2222, "", {"chief": 1, "worker": 2, "ps": 2}),
    ("chief-workers-ps-evaluator", "mnist", "default", 2222, "",
     {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}),
    ("workers-evaluator", "mnist", "default", 2222, "", {"worker": 2, "evaluator": 1}),
    ("chief-workers-ps-domain", "fmnist", "team-a", 2222, "cluster.local",
     {"chief": 1, "worker": 1, "ps": 1}),
]


def address(job, ns, port, domain, role, i):
    return f"{job}-{role}-{i}.{job}-worker.{ns}.svc{'.' + domain if domain else ''}:{port}"


def is_chief(tf_config):
    """TensorFlow's own answer to "is this task the chief" (what MultiWorkerMirroredStrategy
    and Keras use to pick the task that saves). The evaluator is a chief of its own
    evaluation job in TensorFlow's eyes; the operator labels only the training chief."""
    t = tf_config["task"]
    return multi_worker_util.is_chief(tf_config["cluster"], t["type"], t["index"])


def resolver_view(tf_config):
    """What TFConfigClusterResolver returns for a pod with this TF_CONFIG."""
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    try:
        r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        try:
            master = r.master()
        except (ValueError, KeyError) as e:
            master = {"error": f"{type(e).__name__}: {e}"}
        return {"task_type": r.task_type, "task_id": r.task_id,
                "cluster_spec": r.cluster_spec().as_dict(), "rpc_layer": r.rpc_layer,
                "master": master}
    finally:
        del os.environ["TF_CONFIG"]


def case(name, job, ns, port, domain, replicas):
    cluster = {role: [address(job, ns, port, domain, role, i) for i in range(replicas[role])]
               for role in CLUSTER_ROLES if replicas.get(role)}
    pods = []
    for role in ROLES:
        for i in range(replicas.get(role, 0)):
            tf_config = {"cluster": cluster, "task": {"type": role, "index": i}}
            pods.append({"pod": f"{job}-{role}-{i}", "role": role, "index": i,
                         "tf_config": tf_config, "resolver": resolver_view(tf_config),
                         "is_chief": is_chief(tf_config)})
    return {"name": name, "job": job, "namespace": ns, "port": port, "cluster_domain": domain,
            "replicas": {role: replicas.get(role, 0) for role in ROLES}, "pods": pods}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    doc = {"generator": "operator/tests/reference/gen_tfconfig.py",
           "tensorflow": tf.__version__,
           "address": "<job>-<role>-<i>.<job>-worker.<namespace>.svc[.<cluster domain>]:<port>",
           "cases": [case(*c) for c in CASES]}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(doc['cases'])} cases, "
          f"{sum(len(c['pods']) for c in doc['cases'])} pods, TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
