"""`python -m dd_accept.node.step_usage JOB.STEP [JOB.STEP...]`: CPU seconds and resident
memory (now and at its peak) of each step's processes on this node, and the machine's busy CPU, as one JSON line.

Runs on a compute node (stdlib only). Slurm names a step's processes (`scontrol listpids`,
which every process-tracking plugin answers), and the kernel's own counters say what they
cost (`/proc/PID/stat` utime + stime, `/proc/PID/status` VmRSS) and how long they waited for
a CPU another process held (`/proc/PID/task/*/schedstat`). Nothing is estimated from
the outside: the proxy's cost per chunk is the kernel's count of its CPU time, divided by
the chunks its replicas sent. `/proc/stat` is the machine's (containers share one kernel),
so the share of the machine a load level used is read once, here, too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from dd_accept.base.errors import EXIT_PASS

TICKS = os.sysconf("SC_CLK_TCK")


def step_pids(step: str) -> list[int]:
    """The step's processes on this node, as `scontrol listpids` names them."""
    done = subprocess.run(["scontrol", "listpids", step], capture_output=True, text=True, timeout=10, check=False)
    pids = []
    for line in done.stdout.splitlines()[1:]:
        first = line.split()[:1]
        if first and first[0].isdigit():
            pids.append(int(first[0]))
    return pids


def process_usage(pid: int) -> tuple[float, int, int] | None:
    """(CPU seconds, resident kB, peak resident kB) of one process; None once it is gone. The
    CPU includes the children it has waited for (cutime, cstime), so work done in short-lived
    children counts. The peak (VmHWM) is the kernel's own high-water mark: what a process
    held between two readings is seen however briefly it held it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces; what follows it does not
    cpu_s = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS  # utime, stime, cutime, cstime (14-17)
    return cpu_s, _status_kb(status, "VmRSS:"), _status_kb(status, "VmHWM:")


def _status_kb(status: str, field: str) -> int:
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith(field)), 0)


def run_queue_wait(pid: int) -> float | None:
    """Seconds the process's threads spent ready to run while another process held the CPU
    (`/proc/PID/task/*/schedstat`, its second field): what the rest of the machine took from
    it. None once it is gone."""
    waited = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that just ended
                waited += int((task / "schedstat").read_text().split()[1])
    except OSError:
        return None
    return waited / 1e9


def machine_cpu() -> dict[str, float]:
    """The machine's busy, stolen and total CPU seconds since boot (first line of /proc/stat).
    Stolen is what a hypervisor gave another guest while this one had work (a virtual
    machine's CPUs run slower by that much, which no process of its own shows)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    stolen = values[7] if len(values) > 7 else 0
    return {
        "busy_s": (sum(values[:8]) - idle) / TICKS,
        "stolen_s": stolen / TICKS,
        "total_s": sum(values[:8]) / TICKS,
    }


def usage(steps: list[str]) -> dict[str, object]:
    """Per step: each live process's CPU seconds (by PID, so a reader can take per-process
    differences: a process that started between two readings counts whole, one that ended
    is not mistaken for a fall), the resident kB summed."""
    found: dict[str, dict[str, object]] = {}
    for step in steps:
        cpu: dict[str, float] = {}
        wait: dict[str, float] = {}
        rss_kb = peak_kb = 0
        for pid in step_pids(step):
            read = process_usage(pid)
            if read is not None:
                cpu[str(pid)] = round(read[0], 3)
                rss_kb += read[1]
                peak_kb += read[2]
                waited = run_queue_wait(pid)
                if waited is not None:
                    wait[str(pid)] = round(waited, 4)
        found[step] = {"cpu_s": cpu, "wait_s": wait, "rss_kb": rss_kb, "peak_rss_kb": peak_kb, "processes": len(cpu)}
    return {"steps": found, "machine": machine_cpu(), "cpus": os.cpu_count() or 1}


def main() -> int:
    print(json.dumps(usage(sys.argv[1:])))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
