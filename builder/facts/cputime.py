"""The CPU seconds a build used, measured where it ran:

- a Docker build: its container's own cgroup counter (cgroup v2 ``cpu.stat`` ``usage_usec``, v1
  ``cpuacct.usage``), read inside the container as build.sh ends (:data:`CGROUP_CPU_SH`), so before the
  container (and its cgroup) is removed; every process of the build is in it, however it was started;
- a host build: build.sh's own rusage from ``os.wait4`` (:func:`wait_with_rusage`): its children and theirs,
  and only this build's (``RUSAGE_CHILDREN`` would mix in the parallel builds and smoke tests of the run).
"""

from __future__ import annotations

import os
import re
import subprocess
import time

# Where the container leaves its counter, and the shell that writes it (run by bash inside the container).
# v2: the container's own cgroup, named by /proc/self/cgroup ("0::/" under a private cgroup namespace);
# v1: cpuacct, which Docker mounts as the container's own. Nothing found: no file, so no figure.
CGROUP_CPU_FILE = "/tmp/farm-cgroup-cpu"
CGROUP_CPU_SH = (
    "( cg=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null); f=/sys/fs/cgroup${cg%/}/cpu.stat; "
    'if [ -n "$cg" ] && [ -r "$f" ]; then awk \'$1 == "usage_usec" { print "usec", $2 }\' "$f"; exit 0; fi; '
    "for f in /sys/fs/cgroup/cpuacct/cpuacct.usage /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage; do "
    'if [ -r "$f" ]; then echo "nsec $(cat "$f")"; exit 0; fi; done )'
    f" > {CGROUP_CPU_FILE} 2>/dev/null"
)


def parse_cgroup_cpu(text: str) -> float | None:
    """CPU seconds from what :data:`CGROUP_CPU_SH` wrote (``usec N`` or ``nsec N``); None when it found none."""
    m = re.fullmatch(r"\s*(usec|nsec) (\d{1,20})\s*", text)
    if not m:
        return None
    return int(m.group(2)) / (1e6 if m.group(1) == "usec" else 1e9)


def wait_with_rusage(proc: subprocess.Popen, timeout: float, poll: float = 0.2) -> tuple[int, float | None]:
    """Wait for PROC (at most TIMEOUT seconds: subprocess.TimeoutExpired) and return its exit code and the
    CPU seconds (user + system) it and its waited-for descendants used, from ``os.wait4`` on its own pid
    (None when another thread reaped it first: the executor's cleanup, on a signal)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return (proc.returncode if proc.returncode is not None else -9), None
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(poll)
