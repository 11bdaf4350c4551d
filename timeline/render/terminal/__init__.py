"""Terminal renderers: each result as rich tables drawn on a :class:`rich.console.Console` (or plain text).

- :func:`~timeline.render.terminal.summary.render_summary`: ``timeline analyze``;
- :func:`~timeline.render.terminal.collectives.render_collectives_report`: ``timeline collectives``;
- :func:`~timeline.render.terminal.whatif.render_whatif_report`: ``timeline whatif``;
- :func:`~timeline.render.terminal.verdicts.render_table`: ``timeline check``.

rich is imported by these modules only; import the one you need.
"""
