"""`timeline.execution`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.execution.dataset import (
    Written as Written,
)
from timeline.execution.dataset import (
    scan_dataset as scan_dataset,
)
from timeline.execution.dataset import (
    write_dataset as write_dataset,
)
from timeline.execution.graphs import (
    GraphAnalysis as GraphAnalysis,
)
from timeline.execution.graphs import (
    GraphReduction as GraphReduction,
)
from timeline.execution.graphs import (
    graph_files as graph_files,
)
from timeline.execution.graphs import (
    graph_unit as graph_unit,
)
from timeline.execution.reduce import (
    Analysis as Analysis,
)
from timeline.execution.reduce import (
    RankReduction as RankReduction,
)
from timeline.execution.reduce import (
    UnitReduction as UnitReduction,
)
from timeline.execution.reduce import (
    analyze_files as analyze_files,
)
from timeline.execution.reduce import (
    communication_events as communication_events,
)
from timeline.execution.reduce import (
    reduce_unit as reduce_unit,
)
from timeline.execution.reduce import (
    shift_overlap as shift_overlap,
)
from timeline.executors import (
    Executor as Executor,
)
from timeline.executors import (
    ExecutorName as ExecutorName,
)
from timeline.executors import (
    LocalExecutor as LocalExecutor,
)
from timeline.executors import (
    RayExecutor as RayExecutor,
)
from timeline.executors import (
    make_executor as make_executor,
)
from timeline.inputs import (
    Unit as Unit,
)
from timeline.inputs import (
    dataset_parts as dataset_parts,
)
from timeline.inputs import (
    expand_datasets as expand_datasets,
)
from timeline.inputs import (
    is_dataset as is_dataset,
)
from timeline.inputs import (
    plan_units as plan_units,
)

__all__: list[str]
