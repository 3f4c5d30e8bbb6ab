"""Wall time and peak RSS of one command, measured by the kernel.

Shared by the benchmarks that compare digest-gate with other commands.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
RELEASE = ROOT / "target" / "release" / "digest-gate"


def binary_argument(ap: argparse.ArgumentParser):
    """--binary, by default the release build."""
    ap.add_argument("--binary", default=str(RELEASE))


def built(binary: str) -> str:
    """The binary to measure, the release build brought up to date first."""
    if binary == str(RELEASE):
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)
    return binary

# Runs argv[1:] and reports its wall time, peak RSS and exit code on stderr.
# A process of its own: a child's ru_maxrss includes the memory of the
# process it was forked from (the kernel keeps the higher of the two), and a
# benchmark script may hold everything it generated, so measuring from there
# would report it. This launcher is a bare interpreter (~10 MiB).
LAUNCHER = """
import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - started, usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)
"""


def measure(argv: list[str], out: pathlib.Path, stdin: pathlib.Path | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of one run, stdout to `out`."""
    with out.open("wb") as sink, (stdin.open("rb") if stdin else open(os.devnull, "rb")) as source:
        run = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], stdin=source, stdout=sink,
                             stderr=subprocess.PIPE, text=True, check=True)
    seconds, kib, code = run.stderr.split()
    return float(seconds), int(kib) / 1024, int(code)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30):
    """Asks a server to stop (SIGTERM drains digest-gate serve), killing it
    if it has not within `timeout` seconds."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def write_report(out: pathlib.Path, lines: list[str]) -> str:
    """The Markdown report made of `lines`, written to OUT/report.md and
    printed."""
    report = "\n".join(lines) + "\n"
    (out / "report.md").write_text(report)
    print(report)
    return report
