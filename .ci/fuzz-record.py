#!/usr/bin/env python3
"""Records a fuzz campaign (the summary .ci/fuzzrun wrote) as JSON with the date and
the machine: fuzz-record.py SUMMARY OUT SECONDS_PER_TARGET. An existing OUT of the
same machine and time per target is updated target by target. What any run found, and
whether it is fixed, comes from .ci/fuzz-findings.json (kept by hand)."""
import datetime
import json
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer", "bench"))
from machine import cpu_model  # noqa: E402


def main():
    summary, out, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rows = json.load(open(summary))
    findings_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz-findings.json")
    findings = json.load(open(findings_path)) if os.path.exists(findings_path) else []
    clang = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout
    targets = []
    for r in rows:
        mine = [f for f in findings if f["target"] == r["target"]]
        targets.append({
            "target": r["target"],
            "seconds": r["seconds"],
            "max_len": r["max_len"],
            "executions": r["executions"],
            "cov": r["cov"],
            "ft": r["ft"],
            "corpus_units": r["corpus"],
            "crashed_this_run": r["exit"] != 0,
        })
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"arch": platform.machine(), "nproc": os.cpu_count(), "cpu": cpu_model()},
        "compiler": clang.splitlines()[0] if clang else "clang",
        "flags": "-fsanitize=fuzzer,address,undefined -O1; one process per target "
                 "(-jobs=1), -malloc_limit_mb=1100, -rss_limit_mb=2048",
        "seconds_per_target": seconds,
        "note": "cov/ft count edges and features of kubetrain's own code only: cJSON, libyaml "
                "and zlib are the system's uninstrumented libraries.",
        "targets": targets,
        "findings": findings,
    }
    # Targets run separately (FUZZ_TARGETS=...) with the same time each add up in one
    # record: a target's newer row replaces its older one.
    if os.path.exists(out):
        try:
            old = json.load(open(out))
        except ValueError:
            old = {}
        if old.get("seconds_per_target") == seconds and old.get("machine") == doc["machine"]:
            names = {t["target"] for t in targets}
            doc["targets"] = [t for t in old.get("targets", []) if t["target"] not in names] + targets
    # Findings (crashes, leaks, timeouts found by any run, fixed or not) per target.
    for t in doc["targets"]:
        mine = [f for f in findings if f["target"] == t["target"]]
        t.pop("crashes_this_run", None), t.pop("crashes_found_earlier", None)
        t["findings"] = len(mine)
        t["fixed"] = sum(1 for f in mine if f.get("fixed"))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("fuzz: recorded %s" % out)


if __name__ == "__main__":
    main()
