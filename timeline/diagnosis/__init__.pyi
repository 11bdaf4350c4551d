"""`timeline.diagnosis`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.diagnosis.diagnosis import diagnose as diagnose
from timeline.diagnosis.verdict import Diagnosis as Diagnosis

__all__: list[str]
