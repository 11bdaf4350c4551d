"""Results: what timeline answers, as typed, versioned data built in the library.

Each result is a msgspec Struct deriving from :class:`~timeline.results.base.Result`: its ``kind``
(the tag), its layout ``version`` and the ``timeline`` version come first in its JSON; a renderer
(:mod:`timeline.render`) draws it and computes nothing; ``--json`` prints it as it is; its JSON
Schema is in ``docs/schemas/`` (:mod:`timeline.results.schemas`):

- :func:`~timeline.results.summary.build_summary`: the analysis summary (``timeline analyze``), a
  typed :class:`~timeline.results.summary.Summary` (:mod:`timeline.results.base`: a msgspec Struct
  tagged with its kind, its JSON the ``--json`` layout; its schema in ``docs/schemas/``);
- :func:`~timeline.results.diagnosis.build_diagnosis`: the verdict and the findings, a typed
  :class:`~timeline.results.diagnosis.DiagnosisReport`;
- :func:`~timeline.results.collectives.build_collectives_report`: collectives across ranks;
- :func:`~timeline.results.whatif.build_whatif_report`: the what-if predictions (a
  :class:`~timeline.results.whatif.WhatIfReport`); :func:`~timeline.results.whatif.build_seed_report`:
  the seed simulator's (a :class:`~timeline.results.whatif.SeedReport`);
- :class:`~timeline.results.verdicts.CheckReport`: the budget verdicts (``timeline check``);
- :class:`~timeline.results.diff.Diff`: two runs compared (``timeline diff``);
- :func:`~timeline.results.flight_recorder.build_flight_report`: why a hung job stopped (a
  :class:`~timeline.results.flight_recorder.FlightReport`).
"""
