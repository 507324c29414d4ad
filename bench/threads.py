"""Runs a command and says where its CPU time went, thread by thread, without perf (the GPU
machines have none): /proc/PID/task/*/stat sampled every 50 ms, each thread's last reading
kept, summed by thread name. A stage whose busiest thread is busy for most of the wall time is
the job's serial limit.

Usage: python3 bench/threads.py -- sonograph extract ...
Prints one JSON line on stderr (the command's stdout is dropped, its stderr passed on): wall seconds, CPU seconds by thread name (with the thread count and the
busiest thread's seconds; numbered names like decode-3 go under decode), the whole process's
CPU seconds at its last reading (threads that lived less than one sample, such as each row
group's encoder, count there and not by name), and the command's exit status.
"""
import json
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def read_threads(pid):
    """{tid: (name, cpu seconds)} of the process's live threads."""
    found = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # The name sits in parentheses and may hold spaces; the fields after it are fixed.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        found[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK, fields[0])
    return found


def group_name(name):
    """decode-3 and decode-12 are both decode."""
    return name.rstrip("0123456789").rstrip("-") or name


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    started = time.monotonic()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    last, process_cpu = {}, 0.0
    states = {}  # name -> {state letter: samples}: R runs, S sleeps (on a queue, a lock, I/O)
    while child.poll() is None:
        now = read_threads(child.pid)
        last.update(now)
        for name, _, state in now.values():
            group = states.setdefault(group_name(name), {})
            group[state] = group.get(state, 0) + 1
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            process_cpu = (int(fields[11]) + int(fields[12])) / TICK
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
        time.sleep(0.05)
    wall = time.monotonic() - started
    by_name = {}
    for name, seconds, _ in last.values():
        name = group_name(name)
        total, count, busiest = by_name.get(name, (0.0, 0, 0.0))
        by_name[name] = (total + seconds, count + 1, max(busiest, seconds))
    print(file=sys.stderr)
    print(json.dumps({
        "wall_s": round(wall, 2),
        "status": child.returncode,
        "process_cpu_s": round(process_cpu, 2),
        "cpu_s_by_thread": {
            name: {"cpu_s": round(t, 2), "threads": n, "busiest_s": round(b, 2),
                   "running_share": round(states.get(name, {}).get("R", 0)
                                          / max(1, sum(states.get(name, {}).values())), 2)}
            for name, (t, n, b) in sorted(by_name.items(), key=lambda kv: -kv[1][0])
        },
    }), file=sys.stderr)
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
