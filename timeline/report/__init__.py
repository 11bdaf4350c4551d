"""The interactive report: per-iteration Gantt charts of exposed communication, served or exported.

Pipeline: :mod:`timeline.report.data` prepares lanes, segments and exposed pieces with polars (no
bokeh); :mod:`~timeline.report.gantt` and :mod:`~timeline.report.breakdown` turn them into bokeh
models; :mod:`~timeline.report.layout` says how the page follows the window;
:mod:`~timeline.report.dashboard` assembles the views; :mod:`~timeline.report.export` writes one
standalone HTML file (drawn by ``timeline report`` in a helper process:
:mod:`~timeline.report.drawing`) and :mod:`~timeline.report.server` serves the live app.

This package is the only code that imports bokeh, and it does so in the modules above, never
here: importing :mod:`timeline.report` costs nothing (:func:`show` is imported on first use).
The library returns plot objects and shows them only when asked to in a notebook: :func:`show`
(:mod:`timeline.report.notebook`).
"""

from timeline.lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
