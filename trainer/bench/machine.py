"""What the benchmark JSON records about the machine (shared by the bench scripts and
.ci/fuzz-record.py)."""
import platform


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else what platform reports."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
