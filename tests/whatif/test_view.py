"""The dashboard's what-if view: scaling factor against bandwidth, one curve per setting."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tests.whatif.synthetic import gpu_rank, gpu_run
from timeline.report.whatif_view import build_whatif_view, curve_label
from timeline.whatif import sweep
from timeline.whatif.graph import build_graph

pytest.importorskip("bokeh")


def table() -> pl.DataFrame:
    graph = build_graph(gpu_run(gpu_rank()), link_gbps=8.0)
    return sweep(graph, bandwidths_gbps=[1.0, 8.0, 16.0, 100.0], world_sizes=[2, 64], compressions=[1.0, 2.0])


def test_one_curve_per_setting() -> None:
    from bokeh.models import ColumnDataSource, HoverTool, LogScale
    from bokeh.models.annotations import Legend, Span

    plot = build_whatif_view(table(), target_scaling_factor=0.9, measured_scaling_factor=0.82, title="run 7")
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
    (legend,) = [x for x in plot.center if isinstance(x, Legend)]
    items: list[Any] = list(legend.items)
    labels = [item.label.value for item in items]
    assert labels == [
        "N=2, no compression",
        "N=2, 2× compression",
        "N=64, no compression",
        "N=64, 2× compression",
    ]
    spans = {x.name: x.location for x in plot.center if isinstance(x, Span)}
    assert spans == {"target": 0.9, "measured": 0.82}
    assert isinstance(plot.x_scale, LogScale)
    assert plot.title.text == "run 7"
    assert any(isinstance(tool, HoverTool) for tool in plot.tools)


def test_rows_without_a_bandwidth_are_left_out_and_one_setting_is_unlabelled() -> None:
    rows = table().filter((pl.col("world_size") == 2) & (pl.col("compression") == 1.0))
    rows = pl.concat([rows, rows.head(1).with_columns(bandwidth_gbps=pl.lit(None, dtype=pl.Float64))])
    plot = build_whatif_view(rows)
    curves = [r for r in plot.renderers if r.name and r.name.startswith("curve-")]
    assert len(curves) == 1
    assert len(curves[0].data_source.data["bandwidth_gbps"]) == 4
    assert curve_label({"world_size": 2}, ()) == "predicted"
