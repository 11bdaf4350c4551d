"""Results: what timeline answers, as plain, versioned data built in the library.

Each result is a dict of plain values (ints, floats, strings, lists, dicts) with a ``version`` key
whose layout is documented, so that it is printed by a renderer (:mod:`timeline.render`), emitted as
JSON unchanged, and read back (a summary is a ``timeline check`` baseline):

- :func:`~timeline.results.summary.build_summary`: the analysis summary (``timeline analyze``), a
  typed :class:`~timeline.results.summary.Summary` (:mod:`timeline.results.base`: a msgspec Struct
  tagged with its kind, its JSON the ``--json`` layout; its schema in ``docs/schemas/``);
- :func:`~timeline.results.diagnosis.build_diagnosis`: the verdict and the findings, a typed
  :class:`~timeline.results.diagnosis.DiagnosisReport`;
- :func:`~timeline.results.collectives.build_collectives_report`: collectives across ranks;
- :func:`~timeline.results.whatif.build_whatif_report`: the what-if predictions;
- :func:`~timeline.results.verdicts.report_to_dict`: the budget verdicts (``timeline check``).
"""
