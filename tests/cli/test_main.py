"""The entry point: ``timeline NAME ...`` builds only that command and behaves as the full app."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import PARAM


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["analyze", str(PARAM), "--json"], 0),
        (["analyze", "--top", "0", str(PARAM)], 2),
        (["whatif", "--no-such-option"], 2),
    ],
)
def test_main_builds_only_the_command_it_runs(
    args: list[str], code: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[list[str] | None] = []
    real = cli.main.make_app

    def spy(names: list[str] | None = None) -> object:
        built.append(names)
        return real(names)

    monkeypatch.setattr(cli.main, "make_app", spy)
    monkeypatch.setattr(sys, "argv", ["timeline", *args])
    with pytest.raises(SystemExit) as exited:
        cli.main.main(fast_exit=False)
    assert exited.value.code == code
    assert built == [[args[0]]]
    expected = CliRunner().invoke(cli.main.app, args, prog_name="timeline")
    assert expected.exit_code == code
    out = capsys.readouterr()
    assert out.out == expected.stdout
    # click names the program after ``python -m pytest`` here; the real entry point is ``timeline``
    assert out.err.replace("python -m pytest.timeline", "timeline") == expected.stderr


def test_help_and_mistakes_get_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["timeline", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli.main.main(fast_exit=False)
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    for name in cli.main.COMMANDS:
        assert f"  {name} " in listed
