"""The dashboard's what-if view: scaling factor against bandwidth, one curve per setting."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tests.whatif.synthetic import gpu_rank, gpu_run
from timeline.report.whatif_view import build_whatif_view, curve_label
from timeline.results.whatif import WhatIfReport, build_whatif_report
from timeline.whatif.graph import build_graph
from timeline.whatif.settings import Settings

pytest.importorskip("bokeh")


def report(target_sf: float | None = None) -> WhatIfReport:
    graph = build_graph(gpu_run(gpu_rank()), link_gbps=8.0)
    settings = Settings(
        bandwidths=[1.0, 8.0, 16.0, 100.0], world_sizes=[2, 64], compressions=[1.0, 2.0], target_sf=target_sf
    )
    return build_whatif_report(graph, settings)


def test_one_curve_per_setting() -> None:
    from bokeh.models import ColumnDataSource, HoverTool, LogScale
    from bokeh.models.annotations import Legend, Span

    drawn = report(target_sf=0.9)
    plot = build_whatif_view(drawn, title="run 7")
    curves = [r for r in plot.renderers if r.name and r.name.startswith("curve-")]
    assert len(curves) == 4  # 2 world sizes x 2 compression ratios
    for curve in curves:
        source = curve.data_source
        assert isinstance(source, ColumnDataSource)
        assert source.data["bandwidth_gbps"] == [1.0, 8.0, 16.0, 100.0]
        assert {
            "scaling_factor",
            "iteration_ms",
            "exposed_ms",
            "no_overlap_sf",
            "perfect_overlap_sf",
            "label",
        } <= set(source.data)
        factors = source.data["scaling_factor"]
        assert list(factors) == sorted(factors)
    assert not [x for x in plot.center if isinstance(x, Legend)]  # beside the plot, never over a curve
    (legend,) = [x for x in plot.right if isinstance(x, Legend)]
    items: list[Any] = list(legend.items)
    labels = [item.label.value for item in items]
    assert labels == [
        "N=2, no compression",
        "N=2, 2× compression",
        "N=64, no compression",
        "N=64, 2× compression",
    ]
    # the target the report searched for, and the trace's own T_single / T_measured (245 / 300 µs)
    spans = {x.name: x.location for x in plot.center if isinstance(x, Span)}
    assert spans == {"target": 0.9, "measured": pytest.approx(245 / 300)}
    assert isinstance(plot.x_scale, LogScale)
    assert plot.title.text == "run 7"
    assert any(isinstance(tool, HoverTool) for tool in plot.tools)


def test_rows_without_a_bandwidth_are_left_out_and_one_setting_is_unlabelled() -> None:
    full = report()
    rows = [r for r in full.scenarios if r.world_size == 2 and r.compression == 1.0]
    unknown = msgspec.structs.replace(rows[0], bandwidth_gbps=None)
    plot = build_whatif_view(msgspec.structs.replace(full, scenarios=[*rows, unknown]))
    curves = [r for r in plot.renderers if r.name and r.name.startswith("curve-")]
    assert len(curves) == 1
    assert len(curves[0].data_source.data["bandwidth_gbps"]) == 4
    assert curves[0].data_source.data["label"] == ["predicted"] * 4
    assert curve_label(rows[0], ()) == "predicted"
    assert curve_label(rows[0], ("world_size", "compression", "buckets")) == "N=2, no compression, measured"
    spans = [x.name for x in plot.center if getattr(x, "name", None) in ("target", "measured")]
    assert spans == ["measured"]  # no target searched: no target line
