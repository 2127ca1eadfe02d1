"""The docs name only what exists: the modules and files they point at, the environment
variables they document, and the command-line flags they list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lambdaserve import cli

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "core" / "lambdaserve"
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
SOURCES = [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").rglob("*.py"), ROOT / "template.yaml"]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_file_a_page_names_exists(page: Path):
    named = set(re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.py)`", _text(page)))
    missing = [
        path
        for path in sorted(named)
        if not any(
            (base / path).exists() for base in (ROOT, PACKAGE, PACKAGE.parent, ROOT / "scripts")
        )
    ]
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_every_environment_variable_the_docs_name_is_read_by_the_code():
    code = "\n".join(_text(path) for path in SOURCES)
    documented = {name for page in PAGES for name in re.findall(r"LAMBDASERVE_\w+", _text(page))}
    unread = sorted(name for name in documented if name not in code)
    assert not unread, f"documented but never read: {unread}"


def test_the_command_lines_in_configuration_list_only_flags_the_cli_has():
    text = _text(ROOT / "docs" / "configuration.md")
    block = text[text.index("## Command line") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    commands = re.split(r"^lambdaserve (\w+)", block, flags=re.M)[1:]
    parser = cli._parser()
    subparsers = next(
        action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction"
    )
    for name, usage in zip(commands[::2], commands[1::2], strict=True):
        known = set(subparsers.choices[name]._option_string_actions)
        for flag in re.findall(r"--\[no-\]([\w-]+)|(--[\w-]+)", usage):
            option = f"--{flag[0]}" if flag[0] else flag[1]
            assert option in known, f"lambdaserve {name} has no {option}"


# A route as the docs write it: `POST /v2/models/<m>/infer`, `/predictions/{model}/1.0`
_ROUTE = re.compile(
    r"`(?:(?:GET|POST|PUT|DELETE|HEAD|OPTIONS) )?"
    r"(/(?:v1|v2|models|predictions|explanations|wfpredict|workflows|ping|metrics)\b[^`\s]*)"
)


def _served_routes() -> list[str]:
    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.process import Process

    process = Process(get_settings())
    return [
        route.path
        for app in (process.inference_app, process.management_app)
        for route in app.routes
        if getattr(route, "path", None)
    ]


def _pattern(template: str) -> re.Pattern[str]:
    regex = re.sub(r"\\\{[^}]*:path\\\}", ".+", re.escape(template))
    return re.compile(re.sub(r"\\\{[^}]*\\\}", "[^/]+", regex) + "$")


def _variants(route: str) -> list[str]:
    """`/v2/models[/{m}]/stats` as written with and without its optional parts."""
    shortest = route
    while "[" in shortest:
        shortest = re.sub(r"\[[^\[\]]*\]", "", shortest)
    return [shortest, route.replace("[", "").replace("]", "")]


def _served(route: str, templates: list[str]) -> bool:
    concrete = re.sub(r"<[^>]+>", "x", route)
    return any(_pattern(t).match(concrete.rstrip("/") or "/") for t in templates) or any(
        t.startswith(route)
        for t in templates  # a prefix: `/predictions`, `/v2/repository/`
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_route_a_page_names_is_served(page: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    templates = _served_routes()
    named = {m.split("?")[0].rstrip(".,;:") for m in _ROUTE.findall(_text(page))}
    missing = sorted(
        route for route in named if not all(_served(v, templates) for v in _variants(route))
    )
    assert not missing, f"{page.name} names routes lambdaserve does not serve: {missing}"


def test_every_template_parameter_the_docs_name_exists_and_each_is_documented():
    from lambdaserve.local.template import load_template

    parameters = set(load_template(ROOT / "template.yaml")["Parameters"])
    text = _text(ROOT / "docs" / "configuration.md")
    table = text[text.index("## `template.yaml` parameters") : text.index("## Command line")]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = {name for cell in first_cells for name in re.findall(r"`([A-Z][A-Za-z0-9]+)`", cell)}
    assert named - parameters == set(), f"documented, not in template.yaml: {named - parameters}"
    assert parameters - named == set(), f"in template.yaml, not documented: {parameters - named}"
