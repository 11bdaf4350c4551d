"""`timeline`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.analysis.collectives import match_collectives as match_collectives
from timeline.analysis.overlap import Overlap as Overlap
from timeline.analysis.overlap import compute_overlap as compute_overlap
from timeline.dumps import Dumps as Dumps
from timeline.dumps import load_dumps as load_dumps
from timeline.errors import (
    BudgetError as BudgetError,
)
from timeline.errors import (
    ManifestError as ManifestError,
)
from timeline.errors import (
    RankError as RankError,
)
from timeline.errors import (
    TimelineError as TimelineError,
)
from timeline.errors import (
    TraceContentError as TraceContentError,
)
from timeline.errors import (
    TraceFormatError as TraceFormatError,
)
from timeline.errors import (
    UsageError as UsageError,
)
from timeline.importers.rules import ClassificationRules as ClassificationRules
from timeline.results.collectives import build_collectives_report as build_collectives_report
from timeline.results.flight_recorder import build_flight_report as build_flight_report
from timeline.results.summary import build_summary as build_summary
from timeline.results.whatif import build_whatif_report as build_whatif_report
from timeline.run import Inputs as Inputs
from timeline.run import Run as Run
from timeline.run import RunOptions as RunOptions
from timeline.run import analyze as analyze
from timeline.trace import Trace as Trace
from timeline.trace import load as load

__version__: str

__all__: list[str]
