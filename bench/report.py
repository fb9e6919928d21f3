"""bench/report.py -- the benchmark report: every bench/results/*.json into RESULTS.md
with PNG plots, from the committed JSON alone (no benchmark runs).

    python bench/report.py [--results DIR] [--out DIR]

writes OUT/RESULTS.md and OUT/plots/*.png (default OUT: bench/). Each plot and section
names its source file, the machine and date recorded in it, and the commit that last
changed the file (git log), or "uncommitted". A JSON of a shape this script does not
know still gets a section listing its fields, so every file is mentioned.
Needs matplotlib (make bench-report makes a venv for it under $KT_CACHE).
"""
import argparse
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

PLOT_DPI = 110


# ------------------------------------------------------------------------------------
# provenance

def git_commit(path):
    """Short hash and date of the last commit that changed path, or None."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", path],
                             capture_output=True, text=True, check=True,
                             cwd=os.path.dirname(os.path.abspath(path))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def machine_of(doc):
    """'x86_64, 2 CPUs, <model> (family F model M; flags), <library> <set> kernels' from the
    shapes the benchmarks use (the family, flags and kernels where the JSON has them)."""
    m = doc.get("machine")
    if isinstance(m, dict):
        arch = m.get("uname_m") or m.get("arch") or "?"
        nproc, cpu = m.get("nproc"), m.get("cpu")
    else:
        arch, nproc, cpu, m = m or "?", doc.get("nproc"), doc.get("cpu"), {}
    parts = [str(arch)]
    if nproc:
        parts.append("%s CPUs" % nproc)
    if cpu:
        if m.get("cpu_model_number") is not None:
            cpu = "%s (family %s model %s; %s)" % (cpu, m.get("cpu_family"),
                                                   m["cpu_model_number"], m.get("cpu_flags"))
        parts.append(str(cpu))
    if m.get("gemm_kernels"):
        parts.append("%s %s kernels" % (m.get("gemm_library", "?"), m["gemm_kernels"]))
    return ", ".join(parts)


class Source:
    def __init__(self, path, doc):
        self.path, self.doc = path, doc
        self.name = os.path.basename(path)
        self.machine = machine_of(doc)
        self.date = str(doc.get("date", "no date recorded"))
        self.commit = git_commit(path) or "uncommitted"

    def stamp(self):
        return "%s | %s | %s | commit %s" % (self.name, self.machine, self.date, self.commit)


def annotate(fig, sources):
    """The provenance of every source of a figure, along its bottom edge."""
    text = "\n".join(s.stamp() for s in sources)
    fig.text(0.01, 0.01, text, fontsize=7, color="#444444", va="bottom", ha="left")


# ------------------------------------------------------------------------------------
# helpers

def fmt(x, digits=3):
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return "%.0f" % x if abs(x) >= 10 ** digits else "%.*g" % (digits, x)
    return str(x).replace("|", "\\|")


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def save(fig, out_dir, name):
    os.makedirs(os.path.join(out_dir, "plots"), exist_ok=True)
    fig.savefig(os.path.join(out_dir, "plots", name), dpi=PLOT_DPI,
                metadata={"Software": None})
    plt.close(fig)
    return "plots/" + name


def section_head(src, title, benchmark=False):
    """The section's title and source line; with benchmark, the JSON's own description
    of the benchmark after them when it has one."""
    lines = ["## %s" % title, "",
             "Source: `bench/results/%s` (machine: %s; date: %s; commit %s)." %
             (src.name, src.machine, src.date, src.commit), ""]
    if benchmark and src.doc.get("benchmark"):
        lines += ["Benchmark: %s." % src.doc["benchmark"], ""]
    return lines


# ------------------------------------------------------------------------------------
# the known shapes

def is_trainer_core(d):
    return isinstance(d.get("median"), dict) and "kubetrain_default_samples_per_sec" in d["median"]


def is_distributed(d):
    return isinstance(d.get("median"), dict) and "kubetrain_2w_samples_per_sec" in d["median"]


def is_gemm(d):
    return isinstance(d.get("median"), dict) and all(
        isinstance(v, dict) and "step_ms" in v for v in d["median"].values()) and d["median"]


def is_allreduce(d):
    r = d.get("results")
    return isinstance(r, list) and r and all("ring_busbw_GBps" in x for x in r)


def is_operator(d):
    r = d.get("runs")
    return (isinstance(r, list) and r and all("pods_s" in x and "bound_s" in x for x in r)
            and not is_operator_scale(d))


def is_operator_scale(d):
    """bench-operator-scale's file: runs with a restart phase (a failed run has an error)."""
    r = d.get("runs")
    return isinstance(r, list) and r and any("restart" in x for x in r) and \
        all("restart" in x or "error" in x for x in r)


def is_gang_kueue(d):
    r = d.get("runs")
    return isinstance(r, list) and r and all("mode" in x and "started" in x for x in r)


def is_kueue_paths(d):
    return isinstance(d.get("webhooks"), dict) and "bound_median_s" in d.get("summary", {})


def is_recovery_cluster(d):
    return d.get("benchmark") == "recovery-cluster" and isinstance(d.get("runs"), list)


def is_elastic_cluster(d):
    return d.get("benchmark") == "elastic-cluster" and isinstance(d.get("runs"), list)


def is_data_sources(d):
    return str(d.get("benchmark", "")).startswith("data sources")


def is_cifar(d):
    return str(d.get("benchmark", "")).startswith("cifar") and isinstance(d.get("median"), dict)


def is_progress(d):
    w = d.get("windows")
    return isinstance(w, list) and w and all("cpu_percent" in x and "mode" in x for x in w)


# The one-worker runs of trainer-core.json: (field prefix, label, bar label). PyTorch is
# absent from files written before bench-trainer ran it; its bar and row are then left out.
CORE_RUNS = [
    ("kubetrain_default", "kubetrain, 1 worker", "kubetrain\n1 worker"),
    ("kubetrain_t1", "kubetrain, 1 worker, 1 thread", "kubetrain\n1 worker, 1 thread"),
    ("tensorflow", "TensorFlow/Keras, 1 worker", "TensorFlow/Keras\n1 worker"),
    ("pytorch", "PyTorch, 1 worker (CPU)", "PyTorch\n1 worker (CPU)"),
    ("floor_default", "GEMM floor (the step's GEMMs only)", "GEMM floor\n(step's GEMMs only)"),
]
CORE_COLOURS = {"kubetrain_default": "#1f77b4", "kubetrain_t1": "#6baed6",
                "tensorflow": "#ff7f0e", "pytorch": "#d62728", "floor_default": "#999999"}


def throughput_plot(core, dist, out_dir):
    """Samples/s: one worker (trainer-core) and 2/4 workers (distributed), medians as
    bars, each round as a dot. Returns the plot's path, the labels of its bars and what it lacks."""
    bars = []  # (label, median, rounds, colour)
    missing = []
    if core:
        d = core.doc
        med = d["median"]
        rounds = d.get("rounds", [])
        for run, _, label in CORE_RUNS:
            key = run + "_samples_per_sec"
            if key in med:
                bars.append((label, med[key],
                             [r[key] for r in rounds if key in r], CORE_COLOURS[run]))
            elif run == "pytorch":
                missing.append("PyTorch: not in %s (a run from before bench-trainer had it)" %
                               core.name)
    if dist:
        d = dist.doc
        med = d["median"]
        rounds = d.get("rounds", [])

        def per_round(run):
            return [r[run]["samples_per_sec"] for r in rounds
                    if isinstance(r.get(run), dict) and "samples_per_sec" in r[run]]
        for key, run, label, colour in [
                ("kubetrain_2w_samples_per_sec", "kubetrain_2", "kubetrain\n2 workers", "#1f77b4"),
                ("kubetrain_2w_tcp_samples_per_sec", "kubetrain_2_tcp",
                 "kubetrain 2 workers\nTCP ring only", "#aec7e8"),
                ("tensorflow_mwms_2w_samples_per_sec", "tensorflow_2", "TensorFlow MWMS\n2 workers",
                 "#ff7f0e"),
                ("kubetrain_4w_samples_per_sec", "kubetrain_4", "kubetrain\n4 workers", "#1f77b4")]:
            if key in med:
                bars.append((label, med[key], per_round(run), colour))
    if not bars:
        return None, [], missing
    fig, ax = plt.subplots(figsize=(max(10, 1.45 * len(bars)), 5.6))
    fig.subplots_adjust(bottom=0.22)
    xs = range(len(bars))
    ax.bar(xs, [b[1] for b in bars], color=[b[3] for b in bars])
    for x, b in zip(xs, bars):
        ax.scatter([x] * len(b[2]), b[2], color="black", s=12, zorder=3)
        ax.annotate("%.0f" % b[1], (x, b[1]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("samples/s (bar: median, dots: rounds)")
    title = "Training throughput, tutorial-cnn on Fashion-MNIST, batch 64 per worker"
    if missing:
        title += "\n(%s)" % "; ".join(missing)
    ax.set_title(title, fontsize=10)
    annotate(fig, [s for s in (core, dist) if s])
    return (save(fig, out_dir, "samples-per-sec.png"), [b[0].replace("\n", " ") for b in bars],
            missing)


def allreduce_plot(sources, out_dir):
    fig, ax = plt.subplots(figsize=(10, 5.6))
    fig.subplots_adjust(bottom=0.18)
    styles = {"ring": ("-", "o"), "gloo": ("--", "s"), "limit": (":", ""), "shm": ("-.", "^")}
    colours = {2: "#1f77b4", 4: "#d62728"}
    for src in sources:
        rows = src.doc["results"]
        single = len(rows) == 1
        for world in sorted({r["world"] for r in rows}):
            rs = sorted((r for r in rows if r["world"] == world), key=lambda r: r["bytes"])
            mib = [r["bytes"] / 2**20 for r in rs]
            c = colours.get(world, None)
            if single:
                ax.scatter(mib, [r["ring_busbw_GBps"] for r in rs], marker="*", s=120, color=c,
                           zorder=4, label="ring N=%d (%s)" % (world, src.name))
                if "gloo_busbw_GBps" in rs[0]:
                    ax.scatter(mib, [r["gloo_busbw_GBps"] for r in rs], marker="X", s=80,
                               color=c, zorder=4, label="gloo N=%d (%s)" % (world, src.name))
                continue
            ax.plot(mib, [r["ring_busbw_GBps"] for r in rs], styles["ring"][0],
                    marker=styles["ring"][1], color=c, label="kubetrain ring N=%d" % world)
            if "shm_busbw_GBps" in rs[0]:
                ax.plot(mib, [r["shm_busbw_GBps"] for r in rs], styles["shm"][0],
                        marker=styles["shm"][1], color=c,
                        label="kubetrain shared memory N=%d (ring below 256 KiB)" % world)
            if "gloo_busbw_GBps" in rs[0]:
                ax.plot(mib, [r["gloo_busbw_GBps"] for r in rs], styles["gloo"][0],
                        marker=styles["gloo"][1], color=c, label="PyTorch gloo N=%d" % world)
            if "exchange_limit_GBps" in rs[0] and world == 2:
                ax.plot(mib, [r["exchange_limit_GBps"] for r in rs], styles["limit"][0],
                        color="#555555", label="loopback exchange limit (2 processes)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (MiB)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("All-reduce bus bandwidth vs message size on loopback "
                 "(busbw = size/time x 2(N-1)/N)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    annotate(fig, sources)
    return save(fig, out_dir, "allreduce-busbw.png")


def operator_plot(src, out_dir):
    runs = src.doc["runs"]
    fig, ax = plt.subplots(figsize=(10, 5.6))
    fig.subplots_adjust(bottom=0.2)
    xs = list(range(len(runs)))
    w = 0.38
    ours = "#1f77b4", "pod-creation time, kubetrain operator"
    peer = "#ff7f0e", "pod-creation time, %s" % (src.doc.get("peer") or {}).get("name", "peer")
    bound = "#bbbbbb", "client QPS bound: max(0, requests - burst) / qps"
    ax.bar([x - w / 2 for x in xs], [r["pods_s"] for r in runs], w,
           color=[ours[0] if r.get("kind") == "trainingjob" else peer[0] for r in runs])
    ax.bar([x + w / 2 for x in xs], [r["bound_s"] for r in runs], w, color=bound[0])
    ax.set_ylim(0, 1.25 * max(max(r["pods_s"], r["bound_s"]) for r in runs))
    ax.legend(handles=[Patch(color=c, label=l) for c, l in (ours, peer, bound)], fontsize=8,
              loc="upper left")
    for x, r in zip(xs, runs):
        ax.annotate("x%.2f" % (r["pods_s"] / r["bound_s"]) if r["bound_s"] else "",
                    (x - w / 2, r["pods_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, ["%s\nqps %g, burst %s" % (r["run"], r["qps"], r.get("burst", "?"))
                       for r in runs], fontsize=8)
    ax.set_ylabel("seconds (first job created -> last pod seen)")
    jobs = runs[0].get("jobs"), runs[0].get("workers")
    ax.set_title("Operator: %s jobs x %s workers, pod-creation time vs the QPS bound "
                 "(label: time / bound)" % jobs, fontsize=10)
    annotate(fig, [src])
    return save(fig, out_dir, "operator-pods.png")


def operator_scale_plot(src, out_dir):
    """Four panels, one bar per operator: pod creation against the QPS bound, peak RSS
    (first and restarted process), event->action p50/p99, resync after a restart."""
    runs = [r for r in src.doc["runs"] if "restart" in r]
    names = [r["run"] for r in runs]
    colours = ["#1f77b4" if r.get("kind") == "trainingjob" else "#ff7f0e" for r in runs]
    fig, axs = plt.subplots(2, 2, figsize=(11, 7.5))
    fig.subplots_adjust(hspace=0.45, wspace=0.3, bottom=0.12)
    xs = list(range(len(runs)))
    w = 0.38

    def pair(ax, a, b, la, lb, ylabel, title, target=None):
        """Bars a (solid) and b (hatched) per run; a log scale when they span 30x."""
        if target is not None:
            ax.axhline(target, color="#d62728", linestyle="--", linewidth=1,
                       label="target %s" % fmt(target))
        ax.bar([x - w / 2 for x in xs], a, w, color=colours, label=la)
        ax.bar([x + w / 2 for x in xs], b, w, color=colours, alpha=0.45, hatch="//", label=lb)
        for x, v in zip(xs, a):
            ax.annotate(fmt(v), (x - w / 2, v), ha="center", va="bottom", fontsize=7)
        for x, v in zip(xs, b):
            ax.annotate(fmt(v), (x + w / 2, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(xs, names, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(title, fontsize=9)
        vals = [v for v in a + b + [target] if v]
        if vals and max(vals) > 30 * min(vals):
            ax.set_yscale("log")
            ax.set_ylim(min(vals) / 2, 4 * max(vals))
            ax.set_ylabel(ylabel + " (log scale)", fontsize=8)
        else:
            ax.set_ylim(0, 1.25 * max(vals + [1e-9]))
        ax.legend(fontsize=7, loc="upper left")

    pair(axs[0][0], [r["pods_s"] for r in runs], [r["bound_s"] for r in runs],
         "first job -> last pod", "QPS bound", "seconds", "Pod creation vs the client's QPS bound")
    pair(axs[0][1], [r["vmhwm_mib"] for r in runs], [r["restart"]["vmhwm_mib"] for r in runs],
         "peak RSS", "peak RSS, restarted process", "MiB", "Memory",
         (src.doc.get("targets") or {}).get("vmhwm_mib"))
    e2a = [r.get("event_to_action_ms") or {} for r in runs]
    pair(axs[1][0], [e.get("p50", 0) for e in e2a], [e.get("p99", 0) for e in e2a],
         "p50", "p99", "ms", "Event -> action with every pod present",
         (src.doc.get("targets") or {}).get("event_to_action_p99_ms"))
    pair(axs[1][1], [r["restart"]["resync_s"] for r in runs],
         [r["restart"]["quiet_s"] for r in runs], "every status current", "requests stop",
         "seconds after the restart", "Restart: resync (%d jobs changed while down)"
         % runs[0]["restart"].get("jobs_changed_while_down", 0),
         (src.doc.get("targets") or {}).get("restart_resync_s"))
    fig.suptitle("Operators at scale: %s jobs x %s workers (%s pods) on kwok nodes; blue "
                 "kubetrain, orange %s" % (runs[0]["jobs"], runs[0]["workers"], runs[0]["pods"],
                                           (src.doc.get("peer") or {}).get("name", "peer")),
                 fontsize=10)
    annotate(fig, [src])
    return save(fig, out_dir, "operator-scale.png")


def gemm_plot(src, out_dir):
    med = src.doc["median"]
    names = sorted(med, key=lambda k: med[k]["step_ms"])
    fig, ax = plt.subplots(figsize=(10, 5))
    fig.subplots_adjust(bottom=0.16)
    ax.bar(names, [med[k]["step_ms"] for k in names],
           color=["#1f77b4" if k.startswith("openblas") else "#999999" for k in names])
    ax.set_ylabel("ms per step (the step's GEMMs, median)")
    ax.set_title("GEMM backends on the tutorial-cnn step (lower is better; _t1/_t2: threads)",
                 fontsize=10)
    annotate(fig, [src])
    return save(fig, out_dir, "gemm-backends.png")


# ------------------------------------------------------------------------------------
# sections

def trainer_core_section(src):
    d = src.doc
    med = d["median"]
    lines = section_head(src, "Trainer core: one worker (%s)" % src.name, benchmark=True)
    rows = []
    base = med.get("kubetrain_default_samples_per_sec")
    for run, label, _ in CORE_RUNS:
        sps = med.get(run + "_samples_per_sec")
        if sps is None:
            continue
        rows.append([label, sps, med.get(run + "_cpu_ms_per_sample", ""),
                     med.get(run + "_max_rss_mib", ""), base / sps if base and sps else ""])
    if rows:
        lines += [table(["run (medians)", "samples/s", "CPU ms/sample", "max RSS MiB",
                         "kubetrain (default threads) / this"], rows), ""]
    if isinstance(d.get("versions"), dict) and d["versions"]:
        lines += ["Versions: %s." % ", ".join("%s %s" % (k, v) for k, v in d["versions"].items()),
                  ""]
    rows = [[k, med[k]] for k in sorted(med)]
    lines += [table(["median over %d rounds" % len(d.get("rounds", [])), "value"], rows), ""]
    if isinstance(d.get("met"), dict):
        lines += [table(["target", "required", "met"],
                        [[k, d.get("targets", {}).get(k, ""), v] for k, v in d["met"].items()]),
                  ""]
    return lines


def distributed_section(src):
    d = src.doc
    lines = section_head(src, "Distributed: kubetrain launch vs TensorFlow MWMS (%s)" % src.name)
    if d.get("job"):
        lines += ["Job: %s." % d["job"], ""]
    med = d["median"]
    lines += [table(["median over %d rounds" % len(d.get("rounds", [])), "value"],
                    [[k, med[k]] for k in med]), ""]
    if isinstance(d.get("met"), dict):
        lines += [table(["target", "met"], [[k, v] for k, v in d["met"].items()]), ""]
    return lines


def gemm_section(src):
    med = src.doc["median"]
    ratios = src.doc.get("ratios", {})
    lines = section_head(src, "GEMM backends (%s)" % src.name)
    rows = [[k, med[k]["step_ms"], med[k].get("cpu_ms_per_step", ""),
             ratios.get(k, {}).get("wall_speedup_vs_openblas", "")]
            for k in sorted(med, key=lambda k: med[k]["step_ms"])]
    lines += [table(["backend_threads", "step ms", "CPU ms/step", "speed-up vs OpenBLAS"], rows), ""]
    return lines


def allreduce_section(src):
    d = src.doc
    lines = section_head(src, "All-reduce (%s)" % src.name)
    if d.get("definition"):
        lines += ["Definition: %s" % d["definition"], ""]
    rows = [[r["world"], r["bytes"], r["ring_busbw_GBps"], r.get("gloo_busbw_GBps", ""),
             r.get("exchange_limit_GBps", ""), r.get("ring_vs_gloo", ""), r.get("ring_vs_limit", ""),
             r.get("ring_vs_limit_median_of_rounds", ""), r.get("shm_busbw_GBps", "")]
            for r in d["results"]]
    lines += [table(["N", "bytes", "ring GB/s", "gloo GB/s", "loopback limit GB/s",
                     "ring/gloo", "ring/limit (best of each)",
                     "ring/limit (median of paired rounds)", "shared memory GB/s"], rows), ""]
    return lines


def operator_section(src):
    d = src.doc
    lines = section_head(src, "Operator (%s)" % src.name, benchmark=True)
    rows = [[r["run"], r.get("kind", ""), r["qps"], r.get("burst", ""), r["pods_s"], r["bound_s"],
             r.get("pods_over_bound", ""),
             (r.get("event_to_action_ms") or {}).get("p99", ""), r.get("cpu_s", ""),
             r.get("vmhwm_mib", "")]
            for r in d["runs"]]
    lines += [table(["run", "kind", "qps", "burst", "pods s", "bound s", "pods/bound",
                     "event->action p99 ms", "CPU s", "peak RSS MiB"], rows), ""]
    return lines


def gang_kueue_section(src):
    d = src.doc
    lines = section_head(src, "Gang scheduling + Kueue vs neither (%s)" % src.name, benchmark=True)
    sm = d.get("summary", {})
    med, st = sm.get("median_s", {}), sm.get("started_median_s", {})
    sched, cstart = sm.get("scheduled_median_s", {}), sm.get("container_start_median_s", {})
    failed = sm.get("runs_with_failed_scheduling", {})
    modes = ("gang+kueue", "plain", "gang", "kueue")
    lines += [table(["mode", "runs", "median apply->rendezvous s", "median apply->both started s",
                     "median apply->scheduled s", "median scheduled->started s",
                     "runs with FailedScheduling"],
                    [[m, sum(1 for r in d["runs"] if r["mode"] == m), med.get(m, ""),
                      st.get(m, ""), sched.get(m, ""), cstart.get(m, ""), failed.get(m, "")]
                     for m in modes]), "",
              "Ratio gang+kueue / plain: %s to rendezvous, %s to both started (%s)." %
              (fmt(sm.get("ratio_gang_kueue_over_plain")),
               fmt(sm.get("started_ratio_gang_kueue_over_plain")),
               "a traced run, the audit log's cost in its times: not the target's (<= %s)"
               if d.get("trace") else "target <= %s") %
              fmt(d.get("targets", {}).get("ratio_gang_kueue_over_plain")), ""]
    pr = sm.get("paired_ratio_gang_kueue_over_plain")
    if pr:  # from bc0258e's method on
        lines += ["Paired by round (gang+kueue / plain of the same round): median %s; %s of %s "
                  "rounds at or under the target." % (fmt(pr.get("median")),
                                                     pr.get("rounds_at_or_under_target"),
                                                     pr.get("rounds")), ""]
    if d.get("note"):
        lines += [d["note"], ""]
    others = []
    b = d.get("before")
    if b:
        others.append(["before: " + str(b.get("note") or b.get("commit")), b.get("date"),
                       b.get("operator_image", ""),
                       b.get("summary", {}).get("ratio_gang_kueue_over_plain"),
                       (b.get("summary", {}).get("paired_ratio_gang_kueue_over_plain") or
                        {}).get("median", "")])
    for o in d.get("other_runs_same_session", []) + d.get("earlier_runs", []):
        others.append([o.get("what"), o.get("date"), o.get("operator_image", ""),
                       o.get("ratio_gang_kueue_over_plain"),
                       (o.get("paired_ratio_gang_kueue_over_plain") or {}).get("median", "")])
    if others:
        lines += ["Other runs (ratio to rendezvous):", "",
                  table(["run", "date", "operator image", "ratio of medians",
                         "paired median"], others), ""]
    for m, t in sorted(d.get("trace", {}).items()):  # BENCH_TRACE=1: the audit log's steps
        lines += ["Trace, %s (%s runs; medians, ms after the TrainingJob's create was "
                  "received):" % (m, t.get("runs")), "",
                  table(["step", "runs", "received ms", "answered ms", "took ms"],
                        [[x["step"], x["runs"], x["received_ms"], x["answered_ms"],
                          x["took_ms"]] for x in t.get("steps", [])]), ""]
    rows = [[r["mode"], r["run"], r["seconds"], r["started"], r.get("scheduled", ""),
             r.get("failed_scheduling", ""), r.get("facts", "")] for r in d["runs"]]
    lines += [table(["mode", "run", "apply->rendezvous s", "apply->started s",
                     "apply->scheduled s", "FailedScheduling", "facts"], rows), ""]
    return lines


def recovery_cluster_section(src):
    d = src.doc
    lines = section_head(src, "Live recovery vs the group restart on the cluster (%s)" % src.name)
    st = d.get("setup", {})
    if st.get("job"):
        lines += ["Job: %s. Victims by round (seed %s): %s." %
                  (st["job"], st.get("seed"), st.get("victims_by_round")), ""]
    if d.get("note"):
        lines += ["Note: %s" % d["note"], ""]
    cols = [("t0_to_first_step_s", "disruption -> first step s"),
            ("t0_to_step_regained_s", "-> step regained s"),
            ("steps_trained_twice", "steps trained twice"),
            ("replacement_seen_s", "-> replacement created s"),
            ("startup_first_line_s", "replacement start-up (-> first log line) s"),
            ("recovery_minus_startup_s", "recovery - start-up s")]
    rows = []
    for dis, modes in d.get("median", {}).items():
        for mode, m in modes.items():
            n = sum(1 for r in d["runs"] if r["disruption"] == dis and r["mode"] == mode
                    and "error" not in r)
            rows.append([dis, mode, n] + [m.get(k, "") for k, _ in cols])
    lines += ["Medians:", "", table(["disruption", "mode", "runs"] + [c for _, c in cols], rows),
              ""]
    for dis, met in d.get("met", {}).items():
        lines += ["Targets (%s): %s." % (dis, "; ".join("%s: %s" % (k, fmt(v))
                                                        for k, v in met.items())), ""]
    rows = []
    for r in d["runs"]:
        if "error" in r:
            rows.append([r.get("round"), r["disruption"], r["mode"], r["victim"],
                         "failed: %s" % r["error"][:80]] + [""] * 7)
            continue
        rs = r.get("status_restarts", {})
        rows.append([r.get("round"), r["disruption"], r["mode"], r["victim"],
                     r.get("t0_to_first_step_s"), r.get("t0_to_step_regained_s"),
                     "%s -> %s" % (r.get("reached"), r.get("resumed_from")),
                     r.get("steps_trained_twice"), r.get("startup_first_line_s"),
                     "yes" if r.get("survivors_unchanged") else "no",
                     "%s/%s/%s, attempt %s" % (rs.get("application", 0), rs.get("disruption", 0),
                                               rs.get("replaced", 0), rs.get("attempt", 0)),
                     r.get("same_weights")])
    lines += [table(["round", "disruption", "mode", "victim", "-> first step s",
                     "-> regained s", "reached -> resumed", "twice", "start-up s",
                     "survivors unchanged", "restarts app/disr/repl", "same weights"], rows), ""]
    return lines


def elastic_cluster_section(src):
    d = src.doc
    lines = section_head(src, "Elastic vs today's behaviour on the cluster (%s)" % src.name,
                         benchmark=True)
    st = d.get("setup", {})
    if st.get("job"):
        lines += ["Job: %s. Victims by round (seed %s): %s. Modes: %s." %
                  (st["job"], st.get("seed"), st.get("victims_by_round"),
                   "; ".join("%s: %s" % kv for kv in st.get("modes", {}).items())), ""]
    if d.get("note"):
        lines += ["Note: %s" % d["note"], ""]
    cols = [("unschedulable_s", "loss -> unschedulable s"),
            ("t0_to_first_step_s", "loss -> first step s"),
            ("after_detection_s", "unschedulable -> first step s"),
            ("steps_trained_twice", "steps trained twice"),
            ("survivors_restarted", "survivors restarted"),
            ("idle_worker_seconds", "idle worker-s"),
            ("room_back_to_full_s", "room back -> 4 training s"),
            ("loss_to_end_s", "loss -> last step s")]
    rows = []
    for mode, m in d.get("median", {}).items():
        n = sum(1 for r in d["runs"] if r["mode"] == mode and "error" not in r)
        rows.append([mode, n] + [m.get(k, "") for k, _ in cols])
    lines += ["Medians:", "", table(["mode", "runs"] + [c for _, c in cols], rows), ""]
    lines += ["Targets: %s." % "; ".join("%s: %s" % (k, fmt(v))
                                         for k, v in d.get("met", {}).items()), ""]
    rows = []
    for r in d["runs"]:
        if "error" in r:
            rows.append([r.get("round"), r["mode"], r["victim"],
                         "failed: %s" % r["error"][:80]] + [""] * len(cols))
            continue
        rows.append([r.get("round"), r["mode"], r["victim"]] + [r.get(k) for k, _ in cols])
    lines += [table(["round", "mode", "victim"] + [c for _, c in cols], rows), ""]
    return lines


def is_members_latency(d):
    return isinstance(d.get("latency_ms"), dict) and isinstance(d.get("spread_ms"), dict)


def members_latency_section(src):
    d = src.doc
    lines = section_head(src, "Elastic members: annotation to downwardAPI file (%s)" % src.name,
                         benchmark=True)
    q = ("min", "median", "p90", "max")
    lines += ["%s pods, %s rounds, %s." % (d.get("pods"), d.get("rounds"), d.get("kubernetes")), "",
              table(["ms"] + list(q),
                    [["latency"] + [d["latency_ms"].get(k, "") for k in q],
                     ["spread over the pods of a round"] + [d["spread_ms"].get(k, "") for k in q]]),
              ""]
    return lines


def progress_section(src):
    d = src.doc
    lines = section_head(src, "Progress cost (%s)" % src.name, benchmark=True)
    if d.get("mock"):
        lines += ["Mock: %s." % d["mock"], ""]
    if d.get("note"):
        lines += ["Note: %s." % d["note"], ""]
    sm = d.get("summary", {})
    rows = [[m, sm.get(m, {}).get("cpu_percent", ""), sm.get(m, {}).get("rss_mean_mib", ""),
             sm.get(m, {}).get("vmhwm_mib", "")] for m in ("off", "on", "extra")]
    bsm = d.get("before", {}).get("summary", {})
    if bsm:  # the same benchmark before the change the note names
        rows += [["before: " + m, bsm.get(m, {}).get("cpu_percent", ""),
                  bsm.get(m, {}).get("rss_mean_mib", ""), bsm.get(m, {}).get("vmhwm_mib", "")]
                 for m in ("off", "on", "extra")]
    wsm = d.get("without_tf_jobs", {}).get("summary", {})
    if wsm:  # the same run's load without the TensorFlow jobs, for their own share
        rows += [["without the TF jobs: " + m, wsm.get(m, {}).get("cpu_percent", ""),
                  wsm.get(m, {}).get("rss_mean_mib", ""), wsm.get(m, {}).get("vmhwm_mib", "")]
                 for m in ("off", "on", "extra")]
    lines += [table(["progress", "CPU % (median)", "RSS MiB (median of means)", "peak RSS MiB"],
                    rows), "",
              "Targets: extra RSS <= %s MiB, extra CPU <= %s %%." %
              (fmt(d.get("targets", {}).get("extra_rss_mib")),
               fmt(d.get("targets", {}).get("extra_cpu_percent"))), ""]
    rows = [[w["round"], w["mode"], w["seconds"], w["cpu_percent"], w["rss_mean_mib"],
             w["vmhwm_mib"], w.get("scrapes", ""), w.get("jobs_progress_advanced", "")]
            for w in d["windows"]]
    if any("tf_jobs_progress_advanced" in w for w in d["windows"]):
        for r, w in zip(rows, d["windows"]):
            r.append(w.get("tf_jobs_progress_advanced", ""))
    lines += [table(["round", "progress", "window s", "CPU %", "RSS MiB", "peak RSS MiB",
                     "scrapes", "jobs advanced"] +
                    (["of them TF jobs"] if len(rows[0]) > 8 else []), rows), ""]
    return lines


def kueue_paths_section(src):
    d = src.doc
    lines = section_head(src, "Kueue admission paths, no operator (%s)" % src.name, benchmark=True)
    sm = d["summary"]
    modes = list(sm["bound_median_s"])
    runs = [r for r in d.get("runs", []) if "bound_s" in r]
    rows = []
    for m in modes:
        v = sorted(r["bound_s"] for r in runs if r["mode"] == m)
        rows.append([m, sm["bound_median_s"][m], v[0] if v else "", v[-1] if v else "",
                     sm.get("created_median_s", {}).get(m, ""),
                     sm.get("paired_over_plain_median_s", {}).get(m, "")])
    lines += [table(["mode", "bound s (median)", "min", "max", "created s (median)",
                     "over plain, paired (median s)"], rows), ""]
    wh = d["webhooks"]
    lines += [table(["Kueue webhook", "calls", "API server's mean ms"],
                    [[k, wh[k].get("calls", ""), wh[k].get("mean_ms", "")] for k in sorted(wh)]), ""]
    return lines


def operator_scale_section(src):
    d = src.doc
    lines = section_head(src, "Operator at scale (%s)" % src.name, benchmark=True)
    rows = []
    for r in d["runs"]:
        if "error" in r:
            rows.append([r.get("run", "?"), "failed: %s" % r["error"][:80]] + [""] * 10)
            continue
        e, rs, st = r.get("event_to_action_ms") or {}, r["restart"], r.get("steady") or {}
        rows.append([r["run"], "%s x %s" % (r["jobs"], r["workers"]), r["pods_s"], r["bound_s"],
                     r.get("pods_over_bound", ""), r["vmhwm_mib"], rs["vmhwm_mib"],
                     "%s / %s" % (e.get("p50", ""), e.get("p99", "")), rs["resync_s"],
                     rs.get("pods_created", 0) + rs.get("pods_deleted", 0),
                     st.get("status_writes_per_job_per_min", ""),
                     r.get("operator_requests_per_job", ""), r.get("cpu_total_s", "")])
    lines += [table(["run", "jobs", "pods s", "bound s", "pods/bound", "RSS MiB",
                     "RSS restarted MiB", "event->action p50 / p99 ms", "resync s",
                     "pods re-created", "steady status writes /job/min", "requests /job",
                     "CPU s"], rows), ""]
    return lines


def data_sources_section(src):
    d = src.doc
    lines = section_head(src, "Data sources (%s)" % src.name, benchmark=True)
    if d.get("note"):
        lines += ["Note: %s." % d["note"], ""]
    m = d["median"]
    workers = d.get("workers", {})
    rows = [[n, workers.get(n, 1), d["sources"].get(n, ""), m[n]["samples_per_sec"],
             m[n].get("vs_idx", ""), m[n].get("cpu_ms_per_sample", ""),
             m[n].get("cpu_efficiency_vs_idx", ""), m[n]["startup_s"], m[n]["max_rss_mib"],
             m[n].get("same_weights_as_idx", "")] for n in m]
    lines += [table(["source", "workers", "arguments", "samples/s", "x idx", "CPU ms/sample",
                     "idx's CPU / its", "start-up s", "peak RSS MiB",
                     "same weights as idx"], rows), "",
              "Median of %d round(s), each in an order rotated from the round before; x idx "
              "and the weights against idx with as many workers." % len(d["rounds"]), ""]
    if d.get("comparisons"):
        lines += [table(["comparison (samples/s)", "what", "median ratio", "rounds",
                         "CPU (second's / first's)", "target", "met"],
                        [[c["comparison"], c["what"], c["samples_per_sec_ratio"],
                          " ".join("%.2f" % r for r in c["rounds"]), c["cpu_ratio"],
                          ">= %s" % c["target"], c["met"]] for c in d["comparisons"]]), ""]
    else:
        lines += ["Target: %s." % d.get("targets", {}).get("vs_idx", ""), ""]
    rss = d.get("streaming_rss")
    if rss:
        lines += ["Streaming in bounded memory (%s):" % rss["job"], "",
                  table(["set", "files", "data MiB", "examples", "peak RSS MiB", "start-up s",
                         "samples/s"],
                        [[rss[k]["pattern"], rss[k]["files"], rss[k]["data_mib"],
                          rss[k]["examples"], rss[k]["max_rss_mib"], rss[k]["startup_s"],
                          rss[k]["samples_per_sec"]] for k in ("small", "big")]), "",
                  "Peak RSS grew %.1f MiB for %.0f MiB more data." %
                  (rss["rss_growth_mib"], rss["data_growth_mib"]), ""]
    served = [(n, m[n]["server_cpu_ms_per_sample"]) for n in m if "server_cpu_ms_per_sample" in m[n]]
    if served:
        lines += ["The S3 server's own CPU ms per sample, on the same cores (not in the "
                  "trainer's): %s." % ", ".join("%s %s" % (n, fmt(v)) for n, v in served), ""]
    return lines


CIFAR_RUNS = [("kubetrain", "kubetrain, 1 worker"), ("tensorflow", "TensorFlow/Keras fit"),
              ("pytorch", "PyTorch eager (CPU)")]


def cifar_section(src):
    """bench-cifar's file: the three runners' medians, the target, the trainer's profile."""
    d = src.doc
    m = d["median"]
    lines = section_head(src, "CIFAR-shaped model: one worker (%s)" % src.name, benchmark=True)
    if d.get("note"):
        lines += ["Note: %s." % d["note"], ""]
    if d.get("model"):
        lines += ["Model: %s." % d["model"], ""]
    # the ratios are the medians of each round's, as the target is judged
    rows = [[label, m[run + "_samples_per_sec"], m[run + "_cpu_ms_per_sample"],
             m[run + "_max_rss_mib"], m.get("kubetrain_vs_" + run, 1.0),
             m.get("kubetrain_cpu_efficiency_vs_" + run, 1.0)]
            for run, label in CIFAR_RUNS if run + "_samples_per_sec" in m]
    lines += [table(["runner (median of %d rounds)" % len(d.get("rounds", [])), "samples/s",
                     "CPU ms/sample", "peak RSS MiB", "kubetrain samples/s / this",
                     "this CPU / kubetrain's"], rows), ""]
    if isinstance(d.get("met"), dict):
        lines += [table(["target", "required", "met"],
                        [[k, d.get("targets", {}).get(k, ""), v] for k, v in d["met"].items()]),
                  ""]
    if isinstance(d.get("versions"), dict) and d["versions"]:
        lines += ["Versions: %s." % ", ".join("%s %s" % (k, v) for k, v in d["versions"].items()),
                  ""]
    prof = d.get("profile") or {}
    if prof.get("rows"):
        lines += ["Where the trainer's step goes (%d perf samples of the step, %d in all; %s):" %
                  (prof["step_samples"], prof["samples"], prof.get("command", "perf")), "",
                  table(["pass", "layer", "share of the step's CPU", "of which on one thread"],
                        [[r["pass"], r["layer"], r["share_of_step_cpu"], r["one_thread_share"]]
                         for r in prof["rows"]]), ""]
    elif prof.get("error"):
        lines += ["No profile: %s." % prof["error"], ""]
    return lines


def unknown_section(src):
    keys = ", ".join("`%s`" % k for k in src.doc) if isinstance(src.doc, dict) else "(not an object)"
    return section_head(src, "Other results (%s)" % src.name) + [
        "Not plotted: this report does not know its shape. Fields: %s." % keys, ""]


# ------------------------------------------------------------------------------------

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(here, "results"))
    ap.add_argument("--out", default=here)
    a = ap.parse_args()

    sources = []
    for name in sorted(os.listdir(a.results)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(a.results, name)
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit("bench/report.py: %s: %s" % (path, e))
        sources.append(Source(path, doc if isinstance(doc, dict) else {"value": doc}))
    if not sources:
        sys.exit("bench/report.py: no *.json in %s" % a.results)

    core = [s for s in sources if is_trainer_core(s.doc)]
    dist = [s for s in sources if is_distributed(s.doc)]
    ar = [s for s in sources if is_allreduce(s.doc)]
    op = [s for s in sources if is_operator(s.doc)]
    ops = [s for s in sources if is_operator_scale(s.doc)]
    gm = [s for s in sources if is_gemm(s.doc) and s not in core + dist]
    gk = [s for s in sources if is_gang_kueue(s.doc)]
    pr = [s for s in sources if is_progress(s.doc)]
    rcl = [s for s in sources if is_recovery_cluster(s.doc)]
    ecl = [s for s in sources if is_elastic_cluster(s.doc)]
    kp = [s for s in sources if is_kueue_paths(s.doc)]
    ml = [s for s in sources if is_members_latency(s.doc)]
    ds = [s for s in sources if is_data_sources(s.doc)]
    cf = [s for s in sources if is_cifar(s.doc)]

    plots = []
    p, bars, missing = throughput_plot(core[0] if core else None, dist[0] if dist else None, a.out)
    if p:
        peers = [n for n in ("TensorFlow", "PyTorch") if any(b.startswith(n) for b in bars)]
        plots.append(("Training throughput: kubetrain vs %s" % " and ".join(peers or ["its peers"]),
                      p, "Bars: %s.%s" % ("; ".join(bars),
                                          "".join(" Not plotted: %s." % m for m in missing))))
    if ar:
        plots.append(("All-reduce bus bandwidth vs message size", allreduce_plot(ar, a.out), None))
    for s in op:
        plots.append(("Operator pod-creation time vs the QPS bound (%s)" % s.name,
                      operator_plot(s, a.out), None))
    for s in ops:
        plots.append(("Operators at scale (%s)" % s.name, operator_scale_plot(s, a.out), None))
    for s in gm:
        plots.append(("GEMM backends (%s)" % s.name, gemm_plot(s, a.out), None))

    md = ["# Benchmark results", "",
          "Generated by `make bench-report` (bench/report.py) from the committed JSON under",
          "`bench/results/`; no benchmark is run. Do not edit: rerun the benchmark (`make bench-*`),",
          "commit its JSON, then `make bench-report`. Each plot states the source file, machine,",
          "date and the commit that last changed the file.", "",
          "All figures come from a 2-core machine shared with other jobs; the per-round values",
          "show the spread. Peers ran side by side in the same run.", "",
          "| file | machine | date | commit |", "|---|---|---|---|"]
    md += ["| `%s` | %s | %s | %s |" % (s.name, s.machine, s.date, s.commit) for s in sources]
    md += [""]
    md += ["## Plots", ""]
    for title, path, caption in plots:
        md += ["### %s" % title, "", "![%s](%s)" % (title, path), ""]
        if caption:
            md += [caption, ""]
    for s in sources:
        if s in core:
            md += trainer_core_section(s)
        elif s in dist:
            md += distributed_section(s)
        elif s in ar:
            md += allreduce_section(s)
        elif s in op:
            md += operator_section(s)
        elif s in ops:
            md += operator_scale_section(s)
        elif s in gm:
            md += gemm_section(s)
        elif s in gk:
            md += gang_kueue_section(s)
        elif s in pr:
            md += progress_section(s)
        elif s in rcl:
            md += recovery_cluster_section(s)
        elif s in ecl:
            md += elastic_cluster_section(s)
        elif s in kp:
            md += kueue_paths_section(s)
        elif s in ml:
            md += members_latency_section(s)
        elif s in ds:
            md += data_sources_section(s)
        elif s in cf:
            md += cifar_section(s)
        else:
            md += unknown_section(s)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "RESULTS.md"), "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    print("bench/report.py: %s and %d plots from %d files" %
          (os.path.join(a.out, "RESULTS.md"), len(plots), len(sources)))


if __name__ == "__main__":
    main()
