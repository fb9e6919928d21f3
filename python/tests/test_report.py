"""kubetrain without Keras: the chief decision, report() in a custom loop, the termination
message on success and on an exception, a non-chief serving nothing, and the series against
the C trainer's (trainer/src/prom.c) and the operator's parser (operator/src/progress.c).

The programs run as subprocesses: the server and the exit hooks are once per process."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubetrain import is_chief
from kubetrain._progress import Progress

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tf_config(cluster, kind, index):
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


WORKERS = {"worker": ["a:1", "b:1"]}
ROLES = {"chief": ["c:1"], "worker": ["a:1", "b:1"], "ps": ["p:1"]}
CASES = [
    (WORKERS, "worker", 0, True),
    (WORKERS, "worker", 1, False),
    (ROLES, "chief", 0, True),
    (ROLES, "worker", 0, False),
    (ROLES, "ps", 0, False),
]


@pytest.mark.parametrize("cluster,kind,index,chief", CASES)
def test_is_chief(cluster, kind, index, chief):
    assert is_chief(tf_config(cluster, kind, index)) == chief


def test_is_chief_without_a_cluster():
    assert is_chief("") and is_chief("{}") and is_chief('{"task":{"type":"worker","index":3}}')
    # The evaluator trains nothing: not the chief, though TensorFlow's is_chief says so.
    assert not is_chief(tf_config(ROLES, "evaluator", 0))
    with pytest.raises(ValueError, match="TF_CONFIG is not JSON"):
        is_chief("{")


def test_is_chief_as_tensorflow_decides():
    multi_worker_util = pytest.importorskip("tensorflow.python.distribute.multi_worker_util")
    for cluster, kind, index, chief in CASES:
        assert multi_worker_util.is_chief(cluster, kind, index) == chief, (cluster, kind, index)


def run(program, tmp_path, **env):
    """Runs program (Python text) with kubetrain importable, the termination file in
    tmp_path; returns (the process, the message it left or None)."""
    term = tmp_path / "termination"
    e = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "KUBETRAIN_METRICS_PORT")}
    e.update(env, KUBETRAIN_TERMINATION_FILE=str(term))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(program)], env=e,
                       capture_output=True, text=True, timeout=30)
    msg = json.loads(term.read_text()) if term.exists() else None
    return p, msg


LOOP = """
    import urllib.request, kubetrain
    for step in range(1, 6):
        kubetrain.report(step=step, loss=1.0 / step, accuracy=0.5, epoch=1 + step // 3,
                         total_steps=10, samples_per_second=64.0)
        if step == 4:
            kubetrain.checkpoint(4, unix_time=1764072000.0)
    print(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics").read().decode())
"""


def scrape_series(text):
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_report_serves_and_writes_the_result(tmp_path):
    port = free_port()
    p, msg = run(LOOP.replace("PORT", str(port)), tmp_path, KUBETRAIN_METRICS_PORT=str(port),
                 TF_CONFIG=tf_config(WORKERS, "worker", 0))
    assert p.returncode == 0, p.stderr
    got = scrape_series(p.stdout)
    assert got == {"kubetrain_steps_total": 5, "kubetrain_step_seconds_total": 0,
                   "kubetrain_epoch": 2, "kubetrain_loss": 0.2, "kubetrain_accuracy": 0.5,
                   "kubetrain_samples_per_second": 64, "kubetrain_total_steps": 10,
                   "kubetrain_start_step": 0, "kubetrain_checkpoint_step": 4,
                   "kubetrain_checkpoint_timestamp_seconds": 1764072000.0}
    assert msg == {"step": 5, "epoch": 2, "loss": 0.2, "accuracy": 0.5}


def test_exception_writes_its_last_line(tmp_path):
    p, msg = run("""
        import kubetrain
        for step in range(1, 4):
            kubetrain.report(step=step, loss=float("nan"))
        kubetrain.checkpoint(2)
        raise ValueError("the data ran out\\nat record 7")
    """, tmp_path)
    assert p.returncode == 1 and "ValueError: the data ran out" in p.stderr
    assert msg == {"error": "ValueError: the data ran out\nat record 7", "step": 3,
                   "checkpoint_step": 2}


def test_graph_error_gives_why_not_the_stack(tmp_path):
    # TensorFlow's errors for a failed op print "Graph execution error:", the op's
    # Python stack, why, and the op's context; this stands in one of that shape.
    p, msg = run("""
        import kubetrain

        class UnavailableError(Exception):
            pass

        kubetrain.report(step=1, loss=2.5)
        raise UnavailableError("Graph execution error:\\n\\nDetected at node d defined at "
                               "(most recent call last):\\n  File \\"mwms.py\\", line 9\\n\\n"
                               "Collective ops is aborted by: peer task:0 is down\\n"
                               "The error could be from a previous operation.\\n"
                               "\\t [[{{node d}}]] [Op:__inference_train_function_1]")
    """, tmp_path)
    assert p.returncode == 1
    assert msg == {"error": "UnavailableError: Graph execution error: Collective ops "
                            "is aborted by: peer task:0 is down", "step": 1,
                   "checkpoint_step": 0}


def test_non_chief_serves_nothing(tmp_path):
    port = free_port()
    p, msg = run(f"""
        import socket, kubetrain
        kubetrain.report(step=1, loss=2.5)
        socket.create_server(("", {port})).close()  # fails when the port is bound
        print("port free")
    """, tmp_path, KUBETRAIN_METRICS_PORT=str(port), TF_CONFIG=tf_config(WORKERS, "worker", 1))
    assert p.returncode == 0 and "port free" in p.stdout, p.stderr
    # Every task writes its message, as every rank of the C trainer does.
    assert msg == {"step": 1, "loss": 2.5}


def test_without_a_port_nothing_is_served(tmp_path):
    p, _ = run("""
        import threading, kubetrain
        kubetrain.report(step=1)
        print(threading.active_count())
    """, tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == "1", p.stderr


def test_bad_port_names_the_variable(tmp_path):
    p, _ = run("import kubetrain; kubetrain.report(step=1)", tmp_path,
               KUBETRAIN_METRICS_PORT="http")
    assert p.returncode == 1 and "KUBETRAIN_METRICS_PORT='http'" in p.stderr


def prom_c_series():
    """name -> type of each series trainer/src/prom.c writes."""
    text = (ROOT / "trainer/src/prom.c").read_text()
    series = dict(re.findall(r'metric\(f, "(kubetrain_\w+)", "(\w+)"', text))
    series.update(re.findall(r"# TYPE (kubetrain_\w+) (\w+)", text))
    return series


def full_progress():
    p = Progress()
    p.update(7, loss=0.25, accuracy=0.75, epoch=2, total_steps=20, samples_per_second=100.5,
             step_seconds=0.5, start_step=4)
    p.set_checkpoint(6, 1764072000.5)
    return p


def test_series_are_the_c_trainers():
    from prometheus_client import generate_latest
    from prometheus_client.core import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(type("C", (), {"collect": full_progress().collect})())
    text = generate_latest(registry).decode()
    ours = dict(re.findall(r"# TYPE (\w+) (\w+)", text))
    theirs = prom_c_series()
    assert len(theirs) >= 14, theirs  # the regexes still find prom.c's series
    assert {k: theirs.get(k) for k in ours} == ours
    # What the operator reads for status.progress and status.checkpoint, all present.
    assert set(ours) >= {"kubetrain_steps_total", "kubetrain_total_steps",
                         "kubetrain_start_step", "kubetrain_epoch", "kubetrain_loss",
                         "kubetrain_accuracy", "kubetrain_samples_per_second",
                         "kubetrain_checkpoint_step", "kubetrain_checkpoint_timestamp_seconds"}


def test_the_operator_parses_the_series(tmp_path):
    parser = os.environ.get("KUBETRAIN_PARSE_METRICS")
    if not parser:
        pytest.skip("no KUBETRAIN_PARSE_METRICS (python/tests/test-python.sh builds it)")
    port = free_port()
    p, _ = run(LOOP.replace("PORT", str(port)), tmp_path, KUBETRAIN_METRICS_PORT=str(port))
    assert p.returncode == 0, p.stderr
    parsed = subprocess.run([parser], input=p.stdout, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    assert json.loads(parsed.stdout) == {
        "step": 5, "total_steps": 10, "start_step": 0, "epoch": 2, "checkpoint_step": 4,
        "loss": 0.2, "accuracy": 0.5, "samples_per_second": 64.0,
        "checkpoint_time": 1764072000.0}
