"""Notebooks: the results as HTML tables (``_repr_html_``), the report inline, the example notebook run.

The numbers in the HTML tables are read back from their ``data-value`` attributes and checked
against a computation of their own from the trace's kernels (plain Python interval unions), and
against the analysis frames; every text is escaped; ``docs/notebook.ipynb`` runs from start to end
in a kernel on this interpreter (nbclient).
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec
import nbformat
import polars as pl
import pytest
from nbclient import NotebookClient

import timeline
from tests.builders import NCCL_KERNEL, REPO, gpu_run_kineto, write_json
from timeline.errors import UsageError
from timeline.render.html import ROWS_SHOWN, Result, render_collectives_html, render_summary_html
from timeline.results.collectives import CollectivesReport

SAMPLE = REPO / "sample_traces" / "ddp_gloo"
NOTEBOOK = REPO / "docs" / "notebook.ipynb"
BASE_US = 1_000_000.0
STEP_US = 1_000.0


class _Tables(HTMLParser):
    """Every ``<table data-table=NAME>``: its headers and rows of cells ``(text, data-value or None)``."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, Any]] = {}
        self._table: dict[str, Any] | None = None
        self._cell: list[Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "table":
            self._table = {"headers": [], "rows": []}
            self.tables[str(named["data-table"])] = self._table
        elif tag == "tr" and self._table is not None:
            self._table["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = [tag, "", named.get("data-value")]

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            kind, text, value = self._cell
            if kind == "th":
                self._table["headers"].append(text)
            else:
                self._table["rows"][-1].append((text, value))
            self._cell = None
        elif tag == "table":
            self._table = None


def tables_of(html_text: str) -> dict[str, list[dict[str, tuple[str, str | None]]]]:
    """Return each table as rows of ``{header: (text, data-value)}``."""
    parser = _Tables()
    parser.feed(html_text)
    return {
        name: [dict(zip(table["headers"], row, strict=True)) for row in table["rows"] if row]
        for name, table in parser.tables.items()
    }


def _kernel(name: str, ts: float, dur: float, *, stream: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream}}  # fmt: skip


# Per rank, compute kernels on stream 8 that overlap the step's all-reduce [450, 650) µs in part.
EXTRA = {
    0: [(1, 500.0, 60.0)],
    1: [(2, 600.0, 100.0), (0, 420.0, 40.0)],
}


@pytest.fixture
def gpu_run(tmp_path: Path) -> Path:
    """Two GPU ranks, three 1 ms steps each: GEMM [100, 400), all-reduce [450, 650) µs, plus :data:`EXTRA`."""
    run = tmp_path / "run"
    run.mkdir()
    for rank, extra in EXTRA.items():
        records = [
            _kernel("volta_sgemm_128x64_nn", BASE_US + s * STEP_US + at, dur, stream=8)
            for s, at, dur in extra
        ]
        write_json(run / f"rank{rank}.json", gpu_run_kineto(rank, base_us=BASE_US, extra=records))
    return run


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(max(s1, s2), min(e1, e2)) for s1, e1 in a for s2, e2 in b if max(s1, s2) < min(e1, e2)]


def expected_iterations() -> dict[tuple[int, int], dict[str, int]]:
    """Step, compute, comm, hidden and exposed ns of every (rank, iteration), from the kernels written."""
    expected = {}
    for rank, extra in EXTRA.items():
        for s in range(3):
            t0 = int((BASE_US + s * STEP_US) * 1000)
            compute = [(t0 + 100_000, t0 + 400_000)]
            compute += [
                (t0 + int(at * 1000), t0 + int((at + dur) * 1000)) for step, at, dur in extra if step == s
            ]
            comm = [(t0 + 450_000, t0 + 650_000)]
            hidden = _length(_intersection(_union(comm), _union(compute)))
            expected[(rank, s + 1)] = {
                "step_ns": 1_000_000,
                "compute_ns": _length(_union(compute)),
                "comm_ns": _length(_union(comm)),
                "hidden_comm_ns": hidden,
                "exposed_comm_ns": _length(_union(comm)) - hidden,
            }
    return expected


COLUMNS = {"step": "step_ns", "compute": "compute_ns", "comm": "comm_ns", "hidden": "hidden_comm_ns",
           "exposed": "exposed_comm_ns"}  # fmt: skip


def test_analysis_shows_an_html_table_of_its_iterations_checked_against_the_kernels(gpu_run: Path) -> None:
    analysed = timeline.analyze(gpu_run)
    tables = tables_of(analysed._repr_html_())

    expected = expected_iterations()
    shown = {(int(row["rank"][1] or -1), int(row["iteration"][1] or -1)): row for row in tables["iterations"]}
    assert set(shown) == set(expected)
    for key, figures in expected.items():
        for header, column in COLUMNS.items():
            assert int(shown[key][header][1] or -1) == figures[column], (key, header)
        ratio = float(shown[key]["exposed/step"][1] or "nan")
        assert ratio == pytest.approx(figures["exposed_comm_ns"] / figures["step_ns"])
    # the most exposed first: rank 0's steps 1 and 3 and rank 1's step 1 (200 µs exposed each)
    exposed = [int(row["exposed"][1] or -1) for row in tables["iterations"]]
    assert exposed == sorted(exposed, reverse=True)

    # per rank (whole trace: from its first kernel's start to its last kernel's end, a span of
    # iterations): the sums over its iterations, as the analysis frame says
    for row in tables["ranks"]:
        rank = int(row["rank"][1] or -1)
        last_us = max([2 * STEP_US + 650.0] + [s * STEP_US + at + dur for s, at, dur in EXTRA[rank]])
        assert int(row["span"][1] or -1) == int((last_us - 100.0) * 1000)
        for header, column in list(COLUMNS.items())[1:]:
            total = sum(f[column] for (r, _), f in expected.items() if r == rank)
            assert int(row[header][1] or -1) == total, (rank, header)
            frame = analysed.overlap.ranks.filter(pl.col("rank") == rank)
            assert int(row[header][1] or -1) == frame.item(0, column)
        assert row["mode"] == ("gpu", None)

    worst = tables["worst"][0]
    most = max(expected.values(), key=lambda f: f["exposed_comm_ns"])["exposed_comm_ns"]
    assert int(worst["exposed"][1] or -1) == most == 200_000
    assert worst["exposed"][0] == "200.0 µs"

    # top exposed collectives: one group, 6 calls, 6 × 200 µs long, exposed as the ranks' sum
    (top,) = tables["top_collectives"]
    assert top["calls"][1] == "6"
    assert int(top["time"][1] or -1) == 6 * 200_000
    assert int(top["exposed"][1] or -1) == sum(f["exposed_comm_ns"] for f in expected.values())


def test_result_is_the_typed_data_it_wraps(gpu_run: Path) -> None:
    analysed = timeline.analyze(gpu_run)
    summary = analysed.summary()
    assert summary.kind == "summary"
    typed = timeline.build_summary(analysed)
    assert summary.data == typed
    plain = msgspec.to_builtins(typed)
    assert summary.to_dict() == plain
    assert dict(summary) == plain
    assert summary["worst"] == plain["worst"]
    with pytest.raises(UsageError, match="not a timeline result"):
        Result({"version": 1})
    with pytest.raises(UsageError, match="no HTML for a RankRow"):
        Result(typed.ranks[0])._repr_html_()  # a row, not a result
    assert summary.worst == typed.worst  # the typed result's attributes, through the wrapper
    assert Result(plain).data == typed  # its --json read back: decoded into its type


def test_collectives_show_as_html_checked_against_the_kernels(gpu_run: Path) -> None:
    analysed = timeline.analyze(gpu_run)
    report = analysed.collectives()
    tables = tables_of(report._repr_html_())
    rows = tables["collectives"]
    # every step's all-reduce, matched across the two ranks: 3 logical collectives of 200 µs on each
    assert len(rows) == 3
    for row in rows:
        assert row["collective"] == ("all_reduce", None)
        assert row["ranks"][1] == "2"
    assert NCCL_KERNEL.startswith("nccl")
    waits = [int(row["total wait"][1] or -1) for row in rows]
    assert waits == sorted(waits, reverse=True)
    assert report.kind == "collectives"
    assert isinstance(report.data, CollectivesReport)
    assert sorted(waits) == sorted(row.total_wait_ns for row in report.collectives)
    assert report.to_dict()["collectives"] == msgspec.to_builtins(report.data.collectives)


def test_every_text_is_escaped(gpu_run: Path) -> None:
    summary = timeline.analyze(gpu_run).summary_data()
    hostile = '<script>alert("x")</script>&'
    top = msgspec.structs.replace(summary.top_collectives[0], pg_name=hostile, collective=hostile)
    summary = msgspec.structs.replace(
        summary, warnings=[f"{hostile}.json: repaired 1 malformed record"], top_collectives=[top]
    )
    shown = render_summary_html(summary)
    assert "<script>" not in shown
    assert shown.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;") == 3

    report = timeline.analyze(gpu_run).collectives().data
    assert isinstance(report, CollectivesReport)
    first, *rest = report.collectives
    report = msgspec.structs.replace(
        report, collectives=[msgspec.structs.replace(first, group=hostile), *rest], warnings=[hostile]
    )
    shown = render_collectives_html(report)
    assert "<script>" not in shown
    assert shown.count("&lt;script&gt;") == 2


def test_long_tables_say_how_many_rows_were_left_out(gpu_run: Path) -> None:
    summary = timeline.analyze(gpu_run).summary_data()
    row = summary.iterations[0]
    rows = [msgspec.structs.replace(row, iteration=i) for i in range(ROWS_SHOWN + 5)]
    summary = msgspec.structs.replace(summary, iterations=rows, iterations_by_exposure=list(range(len(rows))))
    tables = tables_of(render_summary_html(summary))
    assert len(tables["iterations"]) == ROWS_SHOWN
    assert f"(the first {ROWS_SHOWN} of {ROWS_SHOWN + 5}; to_dict() holds every row)" in render_summary_html(
        summary
    )


def test_report_for_a_notebook_has_the_first_iterations_bars(gpu_run: Path) -> None:
    from timeline.report.notebook import notebook_dashboard

    analysed = timeline.analyze(gpu_run)
    dashboard = notebook_dashboard(analysed)
    bars = dashboard.gantt.source.data
    # the slowest iteration of 2 ranks: each rank's GEMM and all-reduce (and its extra kernel) drawn
    assert len(bars["left"]) >= 4
    assert sorted({str(r) for r in dashboard.ranks.value}) == ["0", "1"]


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``python3`` kernel spec of this interpreter, found first; runtime files under ``tmp_path``."""
    from ipykernel.kernelspec import install

    prefix = tmp_path / "jupyter"
    install(prefix=str(prefix), kernel_name="python3")
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLBACKEND", "agg")


def _outputs(cell: Any) -> list[Any]:
    return list(cell.get("outputs", []))


@pytest.mark.usefixtures("kernel_env")
def test_example_notebook_runs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    check = nbformat.v4.new_code_cell("import sys\nprint(sys.executable)")  # type: ignore[no-untyped-call]
    notebook.cells.append(check)
    client = NotebookClient(
        notebook, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()

    outputs = [output for cell in notebook.cells for output in _outputs(cell)]
    assert [o for o in outputs if o["output_type"] == "error"] == []
    # the kernel is this interpreter (the venv's python), not another one on PATH
    assert outputs[-1]["text"].strip() == sys.executable

    def shown(source: str) -> str:
        (cell,) = [c for c in notebook.cells if c.cell_type == "code" and c.source.splitlines()[-1] == source]
        return "".join(o.get("data", {}).get("text/html", "") for o in _outputs(cell))

    analysed = timeline.analyze(SAMPLE)
    ranks = tables_of(shown("analysed"))["ranks"]
    assert [int(r["exposed"][1] or -1) for r in ranks] == analysed.overlap.ranks.get_column(
        "exposed_comm_ns"
    ).to_list()
    assert "collectives" in tables_of(shown("collectives"))
    assert {"self_replay", "scenarios"} <= set(tables_of(shown("whatif")))
    scenarios = tables_of(shown("whatif"))["scenarios"]
    assert [float(r["bandwidth"][1] or "nan") for r in scenarios] == [1.0, 10.0, 100.0]
    (report,) = [c for c in notebook.cells if "timeline.report.show" in c.source]
    scripts = "".join(str(o.get("data", {}).get("application/javascript", "")) for o in _outputs(report))
    assert "gantt_bars" in scripts
    assert "iteration_select" in scripts
    assert "CustomJS" in scripts  # the selector's and the rank filter's callbacks came along
