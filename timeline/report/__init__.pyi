"""`timeline.report`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.report.notebook import show as show

__all__: list[str]
