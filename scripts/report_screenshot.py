"""The picture of a report in the docs: a run's report.html opened in headless chromium and
photographed (the top of the page, where the status, held-out table and first plots are).

    .venv/bin/python scripts/report_screenshot.py runs/lenient-demo/lenient/compare-strict.html docs/img/report.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

from rlvr.report.browser import CHROMIUM_ARGS, find_chromium


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--height", type=int, default=1700, help="pixels of the page's top to keep")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("needs chromium (Debian: apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1150, "height": args.height})
        page.goto(args.page.resolve().as_uri())
        page.screenshot(path=str(args.png), full_page=False)
        browser.close()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
