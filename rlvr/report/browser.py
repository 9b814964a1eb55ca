"""Finding and starting a headless chromium for the report's browser test and its screenshot.

Debian's `chromium` package (what the set-up installs: `make test` runs the Makefile's `browser`
target) is driven by Playwright with executable_path, so Playwright never downloads a browser.
A `chromium` on PATH that cannot print its version (Ubuntu's apt package is a stub for a snap)
does not count.
"""

from __future__ import annotations

import shutil
import subprocess

# What a root machine with no network needs: no sandbox (root), no GPU, no background connections
# (each would be refused, many at a time), a first run with nothing to set up.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def find_chromium() -> str | None:
    """The path of a chromium that runs, or None."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and "Chromium" in done.stdout:
            return path
    return None
