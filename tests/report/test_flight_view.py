"""The report of Flight Recorder dumps: the data behind the progress grid, the page, the commands, a browser.

The cells are checked against a plain reading of the dumps (:func:`plain_progress`,
:func:`plain_states`), never against the report's own result.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.builders import (
    TRACES,
    clean_job,
    plain_progress,
    plain_states,
    read_folder_plainly,
    run_timeline,
    simulate,
    write_dumps,
)
from timeline.dumps import load_dumps
from timeline.report.flight_view import STATE_COLOURS, progress_cells, render_flight_html
from timeline.results.flight_recorder import build_flight_report

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

FLIGHT = TRACES / "flight_recorder"
GPU_ERROR = FLIGHT / "nvrx_megatron16_gpu_error_1st"
CHROMIUM = Path("/usr/bin/chromium")


def _cells(folder: Path) -> dict[str, list[Any]]:
    return progress_cells(build_flight_report(load_dumps(folder)))


@pytest.mark.parametrize("name", ["nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st"])
def test_cells_are_every_member_with_its_state_and_how_far_behind(name: str) -> None:
    folder = FLIGHT / name
    cells = _cells(folder)
    plain = plain_progress(read_folder_plainly(folder))
    assert len(cells["rank"]) == sum(len(members) for members in plain.values())
    by_cell = {
        (g.split(" · ")[0], r): i for i, (g, r) in enumerate(zip(cells["group"], cells["rank"], strict=True))
    }
    for (pg_name, _), members in plain.items():
        if any(p2p for _, _, p2p in members.values()):
            continue
        states = plain_states(members)
        top = max(c for _, c, _ in members.values())
        for rank, (enqueued, completed, _) in members.items():
            i = by_cell[(pg_name, rank)]
            assert cells["state"][i] == states[rank]
            assert cells["colour"][i] == STATE_COLOURS[states[rank]]
            assert cells["behind"][i] == top - completed
            assert cells["label"][i] == (str(top - completed) if top > completed else "")
            assert cells["enqueued"][i] == f"#{enqueued}"
    # the stopped groups come first, so the red cells are at the top of the picture
    stopped = [
        cells["order"][i] for i, s in enumerate(cells["state"]) if s in ("not_entered", "not_completed")
    ]
    idle = [cells["order"][i] for i, s in enumerate(cells["state"]) if s == "idle"]
    assert max(stopped) < min(idle)


def test_gpu_error_ranks_12_and_14_stand_out() -> None:
    cells = _cells(GPU_ERROR)
    red = {
        (g, r)
        for g, r, s in zip(cells["group"], cells["rank"], cells["state"], strict=True)
        if s == "not_completed"
    }
    assert {r for _, r in red} == {12, 14}
    assert ("74 · expert_model_parallel", 14) in red
    i = next(
        i
        for i, (g, r) in enumerate(zip(cells["group"], cells["rank"], strict=True))
        if g.startswith("74 ") and r == 14
    )
    assert (cells["enqueued"][i], cells["completed"][i], cells["behind"][i]) == ("#20538", "#20529", 7)


def test_the_page_holds_the_verdict_and_the_grid() -> None:
    report = build_flight_report(load_dumps(GPU_ERROR))
    page = render_flight_html(report)
    assert "Why the job stopped" in page
    assert "flight_progress" in page
    assert "flight_cells" in page
    assert "Ranks 12 and 14 stopped in group 74" in page


def test_report_command_writes_the_page_and_refuses_compare(tmp_path: Path) -> None:
    out = tmp_path / "dumps.html"
    result = run_timeline("report", GPU_ERROR, "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {out}\n"
    assert "flight_cells" in out.read_text()
    refused = run_timeline("report", GPU_ERROR, "-o", tmp_path / "x.html", "--compare", GPU_ERROR)
    assert refused.returncode == 2
    assert (
        refused.stderr == "error: --compare compares profiler traces; the inputs are Flight Recorder dumps\n"
    )


def test_report_of_a_clean_run(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path / "dumps", simulate(groups, program))
    out = tmp_path / "clean.html"
    assert run_timeline("report", tmp_path / "dumps", "-o", out).returncode == 0
    assert "No hang" in out.read_text()


@pytest.mark.slow
def test_the_page_renders_in_a_browser(tmp_path: Path) -> None:
    """The exported page in Debian's headless Chromium: no JavaScript error, the grid drawn."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs the dev extra: pip install -e '.[dev]'"
    )
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (tests/report/test_browser.py installs it)")
    out = tmp_path / "dumps.html"
    assert run_timeline("report", GPU_ERROR, "-o", out).returncode == 0
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1450, "height": 1200})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(out.as_uri())
        page.wait_for_function(
            "() => window.Bokeh && Bokeh.documents.length > 0"
            " && Bokeh.documents[0].get_model_by_name('flight_cells') != null",
            timeout=120_000,
        )
        page.locator("canvas").first.wait_for(timeout=30_000)
        data = page.evaluate(
            "() => { const d = Bokeh.documents[0].get_model_by_name('flight_cells').data;"
            " return {rank: Array.from(d.rank), state: Array.from(d.state)}; }"
        )
        page.screenshot(path=str(tmp_path / "dumps.png"))
        browser.close()
    assert errors == []
    stopped = {r for r, s in zip(data["rank"], data["state"], strict=True) if s == "not_completed"}
    assert stopped == {12, 14}
    assert (tmp_path / "dumps.png").stat().st_size > 10_000  # a page was painted, not a blank one


def test_serve_serves_the_dumps_page_and_stops_on_ctrl_c() -> None:
    import signal
    import subprocess
    import urllib.request

    from tests.builders import timeline_command

    server = subprocess.Popen(
        [*timeline_command(), "serve", str(GPU_ERROR), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the server listens
        match = re.fullmatch(
            r"serving the timeline report at (http://127\.0\.0\.1:\d+/) \(Ctrl-C to stop\)\n", line
        )
        assert match is not None, line
        with urllib.request.urlopen(match.group(1), timeout=60) as response:
            assert response.status == 200
            assert "bokeh" in response.read().decode().lower()
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
        assert server.returncode == 0
        assert stderr.endswith("stopped\n")
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=20)
