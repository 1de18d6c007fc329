"""Start N local processes that form one JAX cluster (coordinator on localhost): for tests,
examples and experiments of :mod:`jaxtree.distributed` on one machine.

From a shell (every process runs the command; ``--`` separates it)::

    python -m jaxtree.launch -n 4 --timeout 600 -- python -m experiments.distributed ...

From Python: :func:`launch` returns each process's exit status and output. Each process finds
its place in the environment (``JAXTREE_COORDINATOR``, ``JAXTREE_NUM_PROCESSES``,
``JAXTREE_PROCESS_ID``) and joins with :func:`initialize` before any other JAX call.

A run never hangs: when a process fails, the others get a collective error at their next
reduction (and JAX's heartbeat stops them), and ``grace`` seconds later any survivor is
killed; after ``timeout`` seconds every process still running is killed.

Example:
    Two processes that print their place in the cluster (``launch`` itself does not import
    JAX; a program that uses JAX calls :func:`initialize` first):

    >>> import sys
    >>> from jaxtree.launch import launch
    >>> code = "import os; print(os.environ['JAXTREE_PROCESS_ID'])"
    >>> results = launch([sys.executable, "-c", code], num_processes=2, timeout=60)
    >>> [(result.returncode, result.stdout.strip()) for result in results]
    [(0, '0'), (0, '1')]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

ENV_COORDINATOR = "JAXTREE_COORDINATOR"
ENV_NUM_PROCESSES = "JAXTREE_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXTREE_PROCESS_ID"
# seconds without a heartbeat before JAX declares a process dead, and that a finished process
# waits for the others at shutdown
HEARTBEAT_TIMEOUT = 10
SHUTDOWN_TIMEOUT = 120


def initialize(initialization_timeout: int = 60) -> None:
    """Join the cluster that :func:`launch` started (reads the environment); on CPU, selects
    gloo collectives first. Call before any other JAX computation."""
    import jax

    missing = [name for name in (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)
               if name not in os.environ]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not set: start this program with "
                           "`python -m jaxtree.launch -n N -- <command>` or jaxtree.launch.launch")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ[ENV_COORDINATOR],
                               num_processes=int(os.environ[ENV_NUM_PROCESSES]),
                               process_id=int(os.environ[ENV_PROCESS_ID]),
                               initialization_timeout=initialization_timeout,
                               heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT,
                               shutdown_timeout_seconds=SHUTDOWN_TIMEOUT)


@dataclasses.dataclass
class ProcessResult:
    """How one launched process ended.

    process_id: its index; returncode: its exit status (negative: killed by that signal);
    killed: True when the launcher killed it (timeout, or a peer failed first);
    stdout, stderr: its output.
    """

    process_id: int
    returncode: int
    killed: bool
    stdout: str
    stderr: str


class LaunchError(RuntimeError):
    """A launched process failed; the message holds the failed processes' output."""


def free_port() -> int:
    """A TCP port on localhost that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(command: Sequence[str], num_processes: int, timeout: float = 600.0,
           grace: float = 10.0, env: Optional[dict] = None, cwd: Optional[str] = None
           ) -> list[ProcessResult]:
    """Run ``command`` in ``num_processes`` local processes forming one JAX cluster.

    Args:
      command: the program and its arguments (e.g. ``[sys.executable, "-m", "module", ...]``);
        it must call :func:`initialize` first.
      num_processes: N >= 1.
      timeout: seconds after which every process still running is killed.
      grace: seconds the others may run on after a process fails before they are killed.
      env: extra environment variables; cwd: working directory.

    Returns:
      one :class:`ProcessResult` per process, in process order (:func:`check` raises on
      failures).
    """
    if not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be an integer >= 1; got {num_processes!r}")
    coordinator = f"127.0.0.1:{free_port()}"
    base = {**os.environ, **(env or {}), ENV_COORDINATOR: coordinator,
            ENV_NUM_PROCESSES: str(num_processes)}
    with tempfile.TemporaryDirectory() as folder:
        processes, files = [], []
        for index in range(num_processes):
            out = open(os.path.join(folder, f"{index}.out"), "w+")
            err = open(os.path.join(folder, f"{index}.err"), "w+")
            files.append((out, err))
            processes.append(subprocess.Popen(list(command), stdout=out, stderr=err, cwd=cwd,
                                              env={**base, ENV_PROCESS_ID: str(index)}))
        killed = _supervise(processes, time.monotonic() + timeout, grace)
        results = []
        for index, (process, (out, err)) in enumerate(zip(processes, files)):
            out.seek(0)
            err.seek(0)
            results.append(ProcessResult(index, process.returncode, killed[index], out.read(),
                                         err.read()))
            out.close()
            err.close()
    return results


def _supervise(processes, deadline, grace) -> list[bool]:
    """Wait for every process; kill the rest ``grace`` s after a failure or at ``deadline``.
    Returns which processes were killed."""
    killed = [False] * len(processes)
    failed_at = None
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in processes):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            for index, process in enumerate(processes):
                if process.poll() is None:
                    process.kill()
                    killed[index] = True
            for process in processes:
                process.wait()
            break
        time.sleep(0.05)
    return killed


def check(results: list[ProcessResult]) -> list[ProcessResult]:
    """Return ``results`` if every process exited with status 0, else raise :class:`LaunchError`
    with the output of those that did not."""
    failed = [r for r in results if r.returncode != 0]
    if failed:
        report = "\n".join(
            f"--- process {r.process_id}: exit status {r.returncode}"
            f"{' (killed by the launcher)' if r.killed else ''}\n{r.stdout[-4000:]}"
            f"{r.stderr[-4000:]}" for r in failed)
        raise LaunchError(f"{len(failed)} of {len(results)} processes failed:\n{report}")
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jaxtree.launch",
        description="Run a command in N local processes forming one JAX cluster.")
    parser.add_argument("-n", "--processes", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="kill every process after this many seconds (default 3600)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    results = launch(command, args.processes, timeout=args.timeout)
    for r in results:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
    try:
        check(results)
    except LaunchError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
