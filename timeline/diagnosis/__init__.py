"""The diagnosis: what limits a job and what would fix it, each fix ranked by the gain the replay predicts.

Takes a loaded trace and its overlap analysis; gives a :class:`~timeline.diagnosis.verdict.Diagnosis`
(findings, verdict, model intensity, the bandwidth at which communication hides). The pipeline reads
in the module names:

- :mod:`~timeline.diagnosis.facts`: the diagnosed iterations and what was measured in them;
- :mod:`~timeline.diagnosis.replays`: the what-if replays of those iterations with each fix;
- :mod:`~timeline.diagnosis.ranks`: ``straggler``, ``imbalance``, ``input_stall``, ``launch_bound``;
- :mod:`~timeline.diagnosis.communication`: ``no_overlap``, ``bucketing``, ``slow_link``,
  ``link_underused``, ``compression``, ``exposed_dimension``;
- :mod:`~timeline.diagnosis.horovod`: a Horovod timeline alone;
- :mod:`~timeline.diagnosis.diagnosis`: the verdict.

It imports the analyses, the what-if engine (only when a finding replays) and
:mod:`timeline.results.findings`; never the CLI, the renderers or the report. See
``docs/diagnosis.md``.
"""

from timeline.lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
