"""MkDocs hook: the reference of every command and option, generated from the command's own
argparse parser (asyncclient.cli.build_parser) so that it cannot drift from the code."""

from __future__ import annotations

import argparse
from typing import Any

MARKER = "<!-- asyncclient: cli-options -->"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _description(parser: argparse.ArgumentParser) -> str:
    return _cell((parser.description or "").replace("%%", "%"))


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| Option | Meaning |", "|---|---|"]
    # argparse's own expansion of a help text: `%(default)s` shows the default the parser has,
    # defined once beside the option; `%%` is a percent sign.
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.nargs != 0 and action.metavar is not None:
                name += f" `{action.metavar}`"
            elif action.nargs != 0:
                name += f" `{action.dest.upper()}`"
        else:
            name = f"`{action.metavar or action.dest}`"
        rows.append(f"| {name} | {_cell(formatter._expand_help(action))} |")
    return rows


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}"
                found.append((path, sub))
                found.extend(_commands(sub, path))
    return found


def cli_reference() -> str:
    from asyncclient.cli import build_parser

    parser = build_parser()
    lines = ["## asyncclient", "", _description(parser), "", *_rows(parser), ""]
    for path, sub in _commands(parser, "asyncclient"):
        lines += [f"## {path}", "", _description(sub), "", *_rows(sub), ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
