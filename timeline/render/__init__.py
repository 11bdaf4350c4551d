"""Renderers: each result (plain data from :mod:`timeline.results`, or a check report) turned into output.

One module per format: :mod:`~timeline.render.terminal` (rich tables), :mod:`~timeline.render.json`,
:mod:`~timeline.render.markdown`, :mod:`~timeline.render.junit`, :mod:`~timeline.render.github`.
Nothing here prints, writes files or exits: a renderer returns text or draws on the console it is
given; the command decides where it goes.
"""
