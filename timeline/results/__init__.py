"""Results: what timeline answers, as plain, versioned data built in the library.

Each result is a dict of plain values (ints, floats, strings, lists, dicts) with a ``version`` key
whose layout is documented, so that it is printed by a renderer (:mod:`timeline.render`), emitted as
JSON unchanged, and read back (a summary is a ``timeline check`` baseline):

- :func:`~timeline.results.summary.build_summary`: the analysis summary (``timeline analyze``);
- :func:`~timeline.results.collectives.build_collectives_report`: collectives across ranks;
- :func:`~timeline.results.whatif.build_whatif_report`: the what-if predictions;
- :class:`~timeline.results.verdicts.CheckReport`: the budget verdicts (``timeline check``, a typed
  :class:`~timeline.results.base.Result` of kind ``check``);
- :class:`~timeline.results.diff.Diff`: two runs compared (``timeline diff``, kind ``diff``).

:mod:`timeline.results.schemas` writes the JSON Schema of each typed result into ``docs/schemas``.
"""
