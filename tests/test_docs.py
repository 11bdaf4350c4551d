"""The docs keep up with the code: every command, option, schema column and metric is documented."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.main

from cli.main import app
from tests.builders import REPO
from timeline.schema import (
    COLLECTIVE_EXPOSURE_SCHEMA,
    EVENTS_SCHEMA,
    ITERATION_OVERLAP_SCHEMA,
    RANK_OVERLAP_SCHEMA,
)

DOCS = REPO / "docs"


def commands() -> dict[str, Any]:
    group: Any = typer.main.get_command(app)
    return dict(group.commands)


def test_every_command_has_a_section_in_the_cli_reference() -> None:
    text = (DOCS / "cli.md").read_text()
    for name in commands():
        assert f"## `timeline {name}`" in text, f"docs/cli.md lacks a section for `timeline {name}`"


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_option_is_documented(name: str) -> None:
    text = (DOCS / "cli.md").read_text()
    for param in commands()[name].params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                assert opt in text, f"docs/cli.md does not mention {opt} of `timeline {name}`"


def test_every_event_column_is_documented() -> None:
    text = (DOCS / "schema.md").read_text()
    for column in EVENTS_SCHEMA.names():
        assert f"| `{column}` |" in text, f"docs/schema.md lacks column {column}"


def test_every_output_metric_is_defined() -> None:
    text = (DOCS / "metrics.md").read_text()
    columns = set(RANK_OVERLAP_SCHEMA.names()) | set(ITERATION_OVERLAP_SCHEMA.names())
    columns |= set(COLLECTIVE_EXPOSURE_SCHEMA.names())
    undocumented = {c for c in columns if c.endswith(("_ns", "_ratio")) and f"`{c}`" not in text}
    assert not undocumented, f"docs/metrics.md does not define {sorted(undocumented)}"


def test_readme_commands_are_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    ci = (REPO / ".ci" / "run").read_text()
    assert blocks[0] in ci, "the README's install-and-run command must be what .ci/run runs"
    assert blocks[1] in ci, "the README's test command must be what .ci/run runs"


def test_changelog_has_an_unreleased_section() -> None:
    assert "## [Unreleased]" in (DOCS / "changelog.md").read_text()


_TABLE_START = (
    "<!-- options × commands: generated from the application by tests/test_docs.py::options_table -->"
)
_TABLE_END = "<!-- end of the options table -->"
_VOCABULARY = ("--ranks", "--iterations", "--json", "--markdown")
"""What every command that prints a result takes, or says in its help why not."""


def options_table() -> str:
    """Return the table of every visible long option × every command, in ``timeline --help``'s order.

    To update docs/cli.md: ``python -c 'from tests.test_docs import options_table; print(options_table())'``.
    """
    from cli.main import COMMANDS

    names = list(COMMANDS)
    held: dict[str, set[str]] = {}
    for name in names:
        for param in commands()[name].params:
            if getattr(param, "hidden", False):
                continue
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    held.setdefault(opt, set()).add(name)
    lines = [
        "| option | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *(
            f"| `{opt}` | " + " | ".join("✓" if name in held[opt] else "" for name in names) + " |"
            for opt in sorted(held)
        ),
    ]
    return "\n".join(lines)


def test_the_options_table_is_the_applications() -> None:
    text = (DOCS / "cli.md").read_text()
    assert _TABLE_START in text, "docs/cli.md lacks the options table"
    written = text.split(_TABLE_START, 1)[1].split(_TABLE_END, 1)[0].strip()
    expected = options_table()
    assert written == expected, f"docs/cli.md's options table is out of date; it should read:\n{expected}"


@pytest.mark.parametrize("name", sorted(commands()))
def test_a_command_takes_the_shared_vocabulary_or_says_why_not(name: str) -> None:
    command = commands()[name]
    taken = {opt for param in command.params for opt in getattr(param, "opts", [])}
    missing = [opt for opt in _VOCABULARY if opt not in taken]
    help_text = " ".join((command.help or "").split())
    unsaid = [opt for opt in missing if opt not in help_text]
    assert not unsaid, f"timeline {name} takes none of {unsaid} and its help does not say why"


def _printed_headers() -> set[str]:
    """Return every table header the commands print, on the samples and public traces of the width tests."""
    from typer.testing import CliRunner

    from tests.builders import TRACES
    from tests.builders import WIDTH_CASES as CASES

    samples = REPO / "sample_traces"
    cases = [
        *CASES.values(),
        ("diff", str(samples / "ddp_gloo"), str(samples / "ddp_gloo_4rank")),
        ("collectives", str(samples / "pipeline_gloo"), "--link-gbps", "10", "--align"),
        ("analyze", str(samples / "expert_gloo"), "--align", "--link-gbps", "10"),
        ("whatif", str(samples / "fsdp2_tp_gloo"), "-b", "tp=100,dp=10"),
        (
            "seed",
            str(TRACES / "seed" / "bk_time_logs" / "resnet50.bk.log"),
            "--single-step-ms",
            "100",
            "-b",
            "10",
            "-n",
            "8",
        ),
    ]
    headers: set[str] = set()
    for args in cases:
        out = CliRunner().invoke(app, list(args), env={"COLUMNS": "1000", "NO_COLOR": "1"}).stdout
        for line in out.splitlines():
            if line.startswith("┃"):
                headers.update(cell.strip() for cell in line.strip("┃").split("┃"))
            if line.startswith("STATUS  CHECK"):
                headers.update(cell.strip() for cell in line.split("  ") if cell.strip())
    return headers


def test_every_table_header_printed_is_in_the_glossary() -> None:
    text = (DOCS / "metrics.md").read_text()
    glossary = text.split("## Glossary of the terminal output", 1)[1]
    terms = {
        term
        for row in re.findall(r"^\| (.+?) \|", glossary, flags=re.M)
        for term in re.findall(r"`([^`]+)`", row)
    }
    headers = _printed_headers()
    assert len(headers) > 80, "the commands printed fewer tables than expected"
    missing = sorted(headers - terms)
    assert not missing, f"docs/metrics.md's glossary lacks {missing}"
