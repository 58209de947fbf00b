"""The README's settings table is the Settings class, and its first lines the two commands."""

from __future__ import annotations

from pathlib import Path

from service.config import describe_settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_lists_every_setting_with_its_description() -> None:
    table = README.split("<!-- settings:start -->")[1].split("<!-- settings:end -->")[0]
    for env, _default, description in describe_settings():
        assert f"`{env}`" in table, f"README lacks {env}"
        assert description in table, f"README's description of {env} is stale"


def test_readme_starts_with_the_two_set_up_commands() -> None:
    head = "\n".join(README.splitlines()[:8])
    assert "make demo" in head
    assert "make test" in head


def test_serve_help_lists_every_setting() -> None:
    from service.cli import build_parser

    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    help_text = serve.format_help()
    for env, _default, _description in describe_settings():
        assert env in help_text
