"""The what-if and seed reports as typed data: their ``--json`` decodes back into their types.

Each ``--json`` names its kind, its layout version and timeline's version first, and decodes into
its type exactly (re-encoded, the same bytes); the types hold no ``Any`` and no free-form dict; the
HTML renderer takes the typed report by its type, not by the keys it has.
"""

from __future__ import annotations

import html
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import SAMPLES, TRACES
from timeline import __version__
from timeline.errors import UsageError
from timeline.render.html import Result, render_html, render_whatif_html
from timeline.results.base import encode
from timeline.results.whatif import REPORT_VERSION, SEED_REPORT_VERSION, SeedReport, WhatIfReport

MARKERS = SAMPLES / "ddp_gloo_markers"
PROFILE = TRACES / "seed" / "bk_time_logs" / "vgg16.bk.log"


def _stdout(*args: str) -> bytes:
    result = CliRunner().invoke(cli.main.app, list(args), prog_name="timeline")
    assert result.exit_code == 0, result.stderr
    return result.stdout.encode()


@pytest.fixture(scope="module")
def whatif_json() -> bytes:
    return _stdout("whatif", str(MARKERS), "--link-gbps", "10", "-b", "1,10", "--target-sf", "0.8", "--json")


def test_whatif_json_decodes_into_its_type(whatif_json: bytes) -> None:
    report = msgspec.json.decode(whatif_json, type=WhatIfReport)
    assert (report.version, REPORT_VERSION, report.timeline) == (4, 4, __version__)
    assert whatif_json.startswith(b'{"kind":"whatif","version":4,"timeline":"' + __version__.encode() + b'",')
    assert encode(report) + b"\n" == whatif_json  # nothing lost, nothing reordered
    assert len(report.scenarios) == 2
    assert [t.solve for t in report.targets] == ["bandwidth", "compression", "compression"]
    assert report.target_scaling_factor == 0.8


def test_seed_json_decodes_into_its_type() -> None:
    text = _stdout("seed", str(PROFILE), "--single-step-ms", "194.5", "-n", "64", "-b", "10,25", "--json")
    report = msgspec.json.decode(text, type=SeedReport)
    assert (report.version, SEED_REPORT_VERSION, report.timeline) == (3, 3, __version__)
    assert text.startswith(b'{"kind":"seed","version":3,"timeline":"' + __version__.encode() + b'",')
    assert encode(report) + b"\n" == text
    assert [row.bandwidth_gbps for row in report.scenarios] == [10.0, 25.0]
    # one kind is not the other: the tag tells them apart
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(text, type=WhatIfReport)


def _loose(info: Any, seen: set[int]) -> list[str]:
    """Return the places in a type where ``Any`` or a dict would let any value through."""
    if id(info) in seen:
        return []
    seen.add(id(info))
    if isinstance(info, msgspec.inspect.AnyType):
        return ["Any"]
    if isinstance(info, msgspec.inspect.DictType):
        return [f"dict[{info.key_type}, {info.value_type}]"]
    found: list[str] = []
    if isinstance(info, msgspec.inspect.StructType):
        for field in info.fields:
            found += [f"{info.cls.__name__}.{field.name}: {x}" for x in _loose(field.type, seen)]
    for attribute in ("item_type", "types"):
        inner = getattr(info, attribute, None)
        for item in inner if isinstance(inner, tuple) else [inner] if inner is not None else []:
            found += _loose(item, seen)
    return found


@pytest.mark.parametrize("result", [WhatIfReport, SeedReport])
def test_the_types_hold_no_any_and_no_free_form_dict(result: type[msgspec.Struct]) -> None:
    assert _loose(msgspec.inspect.type_info(result), set()) == []


def test_html_dispatches_on_the_type(whatif_json: bytes) -> None:
    report = msgspec.json.decode(whatif_json, type=WhatIfReport)
    page = render_html(report)
    assert page == render_whatif_html(report) == Result(report)._repr_html_()
    shown = Result(report)
    assert shown.kind == "whatif"
    assert shown.to_dict() == msgspec.json.decode(whatif_json)  # read as its --json layout
    # the numbers are the report's, exact in data-value
    first = report.scenarios[0]
    assert f'data-value="{html.escape(repr(first.iteration_ns), quote=True)}"' in page
    assert f'data-value="{html.escape(repr(first.scaling_factor), quote=True)}"' in page
    # a dict with the keys of a what-if report is no longer guessed to be one
    with pytest.raises(UsageError, match="not a timeline result"):
        render_html({k: v for k, v in msgspec.to_builtins(report).items() if k != "kind"})
