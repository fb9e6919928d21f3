"""A minimal Kubernetes API client for the operator's integration tests and benchmark.

Only the standard library: the admin kubeconfig (client certificate, CA, all embedded)
comes as JSON from `kubectl config view --raw -o json`. One HTTPS connection per Kube
object; make one per thread.
"""
import atexit
import base64
import http.client
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.parse

GROUP = "kubetrain.dev/v1alpha1"


def kill_at_exit(proc):
    """Returns proc (a subprocess.Popen), which is killed when this script ends, however
    it ends (a failed request's exception too) if it still runs then: an operator a test
    script started and left running would act on the next test's cluster."""
    def reap():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    atexit.register(reap)
    return proc


def load_config(kubectl, kubeconfig):
    """Server URL, CA and client certificate of the current context, via kubectl."""
    import subprocess
    raw = subprocess.run([kubectl, "--kubeconfig", kubeconfig, "config", "view", "--raw",
                          "--minify", "-o", "json"], check=True, capture_output=True).stdout
    cfg = json.loads(raw)
    cluster = cfg["clusters"][0]["cluster"]
    user = cfg["users"][0]["user"]
    d = tempfile.mkdtemp(prefix="kube-py-")
    atexit.register(shutil.rmtree, d, True)
    paths = {}
    for k, f in (("client-certificate-data", "crt"), ("client-key-data", "key")):
        p = os.path.join(d, f)
        with open(p, "wb") as fh:
            fh.write(base64.b64decode(user[k]))
        os.chmod(p, 0o600)
        paths[f] = p
    return {"server": cluster["server"],
            "ca": base64.b64decode(cluster["certificate-authority-data"]).decode(),
            "crt": paths["crt"], "key": paths["key"], "dir": d}


class ApiError(Exception):
    def __init__(self, code, body):
        super().__init__(f"HTTP {code}: {body[:300]!r}")
        self.code = code


class Kube:
    def __init__(self, cfg, timeout=30):
        u = urllib.parse.urlsplit(cfg["server"])
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cadata=cfg["ca"])
        self.ctx.load_cert_chain(cfg["crt"], cfg["key"])
        self.timeout = timeout
        self.conn = None

    def _connect(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def request(self, method, path, body=None, ctype="application/json"):
        """One request; returns the decoded JSON answer. Reconnects once on a dropped
        connection; raises ApiError for a non-2xx answer."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": ctype, "Accept": "application/json"} if data else \
            {"Accept": "application/json"}
        for attempt in (0, 1):
            try:
                if self.conn is None:
                    self.conn = self._connect()
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn = None
                if attempt:
                    raise
        if r.status // 100 != 2:
            raise ApiError(r.status, raw)
        return json.loads(raw) if raw else None

    def get(self, path):
        return self.request("GET", path)

    def create(self, path, obj):
        return self.request("POST", path, obj)

    def merge_patch(self, path, patch):
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def watch(self, path, stop=None, resource_version=None):
        """Yields (receive_time, event) for each watch event of path (a list URL with
        ?watch=1 added here) until the stream ends. Reads block: stop() is looked at
        after each chunk, so a thread watching a quiet resource ends at its next event
        (run watches in daemon threads). resource_version resumes after that version."""
        sep = "&" if "?" in path else "?"
        conn = self._connect()
        rv = f"&resourceVersion={resource_version}" if resource_version else ""
        conn.request("GET", path + sep + "watch=1&allowWatchBookmarks=false" + rv,
                     headers={"Accept": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise ApiError(r.status, r.read())
        conn.sock.settimeout(None)
        buf = b""
        try:
            while not (stop and stop()):
                chunk = r.read1(65536)
                if not chunk:
                    return
                now = time.time()
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield now, json.loads(line)
        finally:
            conn.close()


def watch_resumed(kube_client, path, stop):
    """Like Kube.watch, but when the server ends the stream (it closes watchers that fall
    behind), watches again from the last resourceVersion seen, so no event is lost.
    Raises RuntimeError when the server cannot resume (410 Gone); other ERROR events
    (a watch cache catching up) are retried after the delay they ask for."""
    rv = None
    while not stop():
        for t, ev in kube_client.watch(path, stop, rv):
            if ev.get("type") == "ERROR":
                st = ev.get("object") or {}
                if st.get("code") == 410:
                    raise RuntimeError(f"watch error: {st}")
                # e.g. 504 "Too large resource version" from a watch cache still catching
                # up after the apiserver started: retry from the same version.
                time.sleep((st.get("details") or {}).get("retryAfterSeconds", 1))
                break
            rv = ev["object"]["metadata"].get("resourceVersion", rv)
            yield t, ev


def ns_path(ns, plural, name=None, sub=None, group=None):
    base = f"/apis/{group}" if group else "/api/v1"
    p = f"{base}/namespaces/{ns}/{plural}"
    if name:
        p += "/" + name
    if sub:
        p += "/" + sub
    return p


def pod_running_status():
    return {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{
                           "name": "trainer", "image": "kubetrain/trainer", "imageID": "",
                           "ready": True, "restartCount": 0,
                           "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}


def pod_exit_status(code, message=""):
    return {"status": {"phase": "Succeeded" if code == 0 else "Failed",
                       "conditions": [{"type": "Ready", "status": "False"}],
                       "containerStatuses": [{
                           "name": "trainer", "image": "kubetrain/trainer", "imageID": "",
                           "ready": False, "restartCount": 0,
                           "state": {"terminated": {
                               "exitCode": code, "message": message,
                               "startedAt": "2026-01-01T00:00:00Z",
                               "finishedAt": "2026-01-01T00:00:01Z"}}}]}}


def training_job(name, workers, **spec):
    s = {"workers": workers, "checkpoint": {"claimName": "ckpt"}}
    s.update(spec)
    return {"apiVersion": GROUP, "kind": "TrainingJob", "metadata": {"name": name}, "spec": s}
