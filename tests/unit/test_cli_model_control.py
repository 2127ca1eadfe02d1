"""tritonserver's `--model-control-mode` on `lambdaserve dev` and `serve`: the mode reaches
the settings every process of the command reads (LAMBDASERVE_MODEL_CONTROL_MODE)."""

from __future__ import annotations

import pytest

from lambdaserve import cli
from lambdaserve.processes import serve
from lambdaserve.settings import Settings


def test_serve_takes_tritons_model_control_mode_flag(monkeypatch):
    """Given `lambdaserve serve --model-control-mode none`,
    When the command starts,
    Then the settings it serves with refuse load and unload (mode none)."""
    # set through monkeypatch so the value main() writes is undone after the test
    monkeypatch.setenv("LAMBDASERVE_MODEL_CONTROL_MODE", "explicit")
    seen: list[str] = []
    monkeypatch.setattr(
        serve, "serve", lambda *a, **k: seen.append(Settings.from_env().model_control_mode)
    )
    assert cli.main(["serve", "--model-control-mode", "none"]) == 0
    assert seen == ["none"]


def test_a_mode_triton_does_not_have_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        cli.main(["dev", "--model-control-mode", "sometimes"])
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err
