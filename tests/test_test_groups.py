"""The suite's own scheduling: tests that read one shared run must share an xdist worker, or
`make test` builds that run once per worker (tests/conftest.py, SHARED_FIXTURES). pytest 9 moved
the node id xdist's loadgroup writes its "@group" into; conftest writes it where pytest reads it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBING = os.environ.get("RLVR_PROBE_GROUPS") == "1"


@pytest.mark.xdist_group("probe")
@pytest.mark.parametrize("i", ["a", "b", "c", "kill@1", "kill@2", "kill@3"])  # an "@" of a parameter's own (the kill points' ids)
def test_probe(i):
    if not PROBING:
        pytest.skip("run by test_tests_of_one_group_run_on_one_worker")


def test_tests_of_one_group_run_on_one_worker():
    here = Path(__file__)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                           str(here), "-k", "probe"], capture_output=True, text=True, timeout=300, cwd=here.parent.parent,
                          env={**os.environ, "RLVR_PROBE_GROUPS": "1"})
    ran = re.findall(r"\[(gw\d)\].*PASSED .*test_probe\[[a-z]+(?:@\d)?\](@\w+)", done.stdout)
    assert len(ran) == 6, done.stdout[-2000:] + done.stderr[-2000:]
    assert {suffix for _, suffix in ran} == {"@probe"} and len({worker for worker, _ in ran}) == 1, ran
