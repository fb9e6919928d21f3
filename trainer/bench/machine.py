"""What the benchmark JSON records about the machine (shared by the bench scripts and
.ci/fuzz-record.py): the CPU's model and the feature flags that decide the kernels'
width, and the kernels the trainer's GEMM runs on, so that no figure is read without
its machine."""
import os
import platform
import re
import subprocess

# The /proc/cpuinfo flags that decide which kernels run (cpu.c's list; "pni" is SSE3).
WIDTH_FLAGS = ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16",
               "amx_tile", "amx_bf16", "avx2", "fma", "avx", "pni")


def _cpuinfo():
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            if not line.strip():
                break
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
    except OSError:
        pass
    return fields


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what platform reports."""
    return _cpuinfo().get("model name") or platform.processor()


def cpu_info():
    """Vendor, family, model number, model name and the width-deciding feature flags."""
    f = _cpuinfo()
    flags = set(f.get("flags", "").split())

    def num(key):
        try:
            return int(f[key])
        except (KeyError, ValueError):
            return None
    return {"cpu": cpu_model(), "cpu_vendor": f.get("vendor_id"), "cpu_family": num("cpu family"),
            "cpu_model_number": num("model"),
            "cpu_flags": " ".join(x for x in WIDTH_FLAGS if x in flags)}


def gemm_kernels(trainer):
    """The trainer's `--print-cpu` line and its parts: the GEMM library, the kernel set and
    who chose it ({"gemm_error": ...} when the trainer cannot say)."""
    try:
        out = subprocess.run([trainer, "--print-cpu"], capture_output=True, text=True,
                             timeout=60, env=dict(os.environ)).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return {"gemm_error": str(e)}
    line = out.splitlines()[0] if out else ""
    m = re.match(r"gemm: (.+?), (\S+) kernels, (.+?) \(cpu: ", line)
    if not m:
        return {"gemm_error": "unexpected --print-cpu output: %r" % out}
    info = {"gemm": line[len("gemm: "):], "gemm_library": m.group(1),
            "gemm_kernels": m.group(2), "gemm_kernels_origin": m.group(3)}
    if "warning:" in out:
        info["gemm_warning"] = out.split("warning: ", 1)[1].strip()
    return info


def machine(trainer=None, **extra):
    """The machine block of a benchmark JSON: architecture, CPUs, the CPU, and with a
    trainer binary the kernels its GEMM runs on; extra fields appended."""
    m = {"uname_m": platform.machine(), "nproc": os.cpu_count()}
    m.update(cpu_info())
    if trainer:
        m.update(gemm_kernels(trainer))
    m.update(extra)
    return m
