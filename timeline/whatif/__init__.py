"""What-if: predict iteration time and scaling from a real trace under other conditions.

Takes a loaded trace; gives predictions. The pipeline reads in the module names:

- :mod:`~timeline.whatif.graph`: the run's dependency graph (compute, gradient-ready times,
  collectives with bytes, order and channel, who waits for whom);
- :mod:`~timeline.whatif.costs`: ring and tree cost models, latency, efficiency;
- :mod:`~timeline.whatif.bucketing`: DDP bucket caps and Horovod-style fusion;
- :mod:`~timeline.whatif.compression`: compression ratio with encode/decode cost (MLSys'22);
- :mod:`~timeline.whatif.engine`: the replay, a :class:`Scenario` in, a :class:`Prediction` out;
- :mod:`~timeline.whatif.sweeps`: sweeps over bandwidths, world sizes, compression ratios, bucket
  policies, and the bandwidth or compression that reaches a scaling factor;
- :mod:`~timeline.whatif.seed`: the seed paper's backward profiles (``*.bk.log``) and simulator.

Names are imported when first used: ``timeline whatif`` reads its options without importing polars
(its ``--help`` starts fast).

See ``docs/whatif.md``. The research code that checks these predictions (the seed paper's
experiment, the two-namespace DDP experiment) lives outside the package, in ``experiments/``.
"""

from timeline.lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
