"""The interactive report: per-iteration Gantt charts of exposed communication, served or exported.

Pipeline: :mod:`timeline.report.data` prepares lanes, segments and exposed pieces with polars (no
bokeh); :mod:`~timeline.report.gantt` and :mod:`~timeline.report.breakdown` turn them into bokeh
models (holoviews for the heat map); :mod:`~timeline.report.dashboard` assembles the views;
:mod:`~timeline.report.export` writes one standalone HTML file and :mod:`~timeline.report.server`
serves the live app.

This package is the only code that imports bokeh and holoviews, and it does so in the modules
above, never here: importing :mod:`timeline.report` costs nothing. The library returns plot
objects; it never shows them.
"""

from __future__ import annotations
