"""Results: what timeline answers, as typed, versioned data built in the library.

Each result is a msgspec Struct deriving from :class:`~timeline.results.base.Result`: its ``kind``
(the tag), its layout ``version`` and the ``timeline`` version come first in its JSON; a renderer
(:mod:`timeline.render`) draws it and computes nothing; ``--json`` prints it as it is; its JSON
Schema is in ``docs/schemas/`` (:mod:`timeline.results.schemas`):

- :func:`~timeline.results.summary.build_summary`: the analysis summary (``timeline analyze``);
- :func:`~timeline.results.collectives.build_collectives_report`: collectives across ranks;
- :func:`~timeline.results.whatif.build_whatif_report`: the what-if predictions (a
  :class:`~timeline.results.whatif.WhatIfReport`); :func:`~timeline.results.whatif.build_seed_report`:
  the seed simulator's (a :class:`~timeline.results.whatif.SeedReport`);
- :class:`~timeline.results.verdicts.CheckReport`: the budget verdicts (``timeline check``);
- :class:`~timeline.results.diff.Diff`: two runs compared (``timeline diff``);
- :func:`~timeline.results.flight_recorder.build_flight_report`: why a hung job stopped (a
  :class:`~timeline.results.flight_recorder.FlightReport`).
"""
