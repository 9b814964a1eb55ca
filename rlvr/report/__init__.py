"""The run report: report.html from a run directory's files (runs.py reads them, figures.py draws
the plots, page.py writes the page). `rlvr report RUN_DIR [RUN_DIR ...]` and the pipeline call
`write_report`."""

from rlvr.report.page import REPORT, write_report

__all__ = ["REPORT", "write_report"]
