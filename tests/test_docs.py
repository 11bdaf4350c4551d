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
