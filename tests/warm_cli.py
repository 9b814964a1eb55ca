"""Run the `rlvr` command in a child process that starts with torch and rlvr already imported.

A fresh interpreter spends most of an `rlvr` test command (~10 s of ~12) importing torch,
transformers and rlvr; the resume, recipe and evaluation tests run dozens of commands. Here every
command is still its own process, so a SIGKILL at a fault point, an exit status, the environment,
the working directory and stderr behave as for `rlvr` started from a shell, but each is forked
from one server process that imported those modules once (multiprocessing's forkserver with a
preload). The server only imports: no torch thread pool or Ray connection exists to be forked.
Tests about the process boundary itself (the console script, a pipe's terminal settings, Ray's
driver) keep a real `subprocess.run`.
"""

import atexit
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Ray is left out: its client threads and gRPC state must not be forked, and a local run never imports it.
PRELOAD = ["torch", "transformers", "rlvr.cli", "rlvr.pipeline"]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _command(args: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> None:
    """The child: `python -m rlvr.cli *args` in a process that has already imported PRELOAD."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, stdout), (2, stderr)):
        os.dup2(os.open(path, os.O_WRONLY), fd)
    import rlvr.cli

    sys.argv = [rlvr.cli.__file__, *args]
    try:
        rlvr.cli.app(args=args, prog_name="rlvr")
    finally:
        # A forked child leaves by os._exit, which skips atexit; a real interpreter runs these
        # handlers (trackers finishing, pools stopping), so run them as it would.
        atexit._run_exitfuncs()


def run_rlvr(*args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """As subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, ...):
    env and cwd default to this process's, a run past timeout is killed and raises TimeoutExpired."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        out.touch()
        err.touch()
        child = _context.Process(target=_command, args=(list(args), dict(os.environ if env is None else env), str(cwd or os.getcwd()), str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired([sys.executable, "-m", "rlvr.cli", *args], timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(["rlvr", *args], child.exitcode, out.read_text(), err.read_text())
