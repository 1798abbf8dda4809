"""docs/cli.md, the command line's reference, generated from the typer app (``make docs``).

Every command and subcommand with its usage, help and a table of its arguments and options, read
from the (click) command typer builds, so the page says what ``tlmsearch COMMAND --help`` says.
``python -m tlmsearch.cli_reference --out docs/cli.md`` writes it; tests/test_docs.py fails when
the committed page is stale.
"""

from __future__ import annotations

import argparse
import typing
from pathlib import Path
from typing import Any

import typer

from tlmsearch.cli import app

HEADER = """# Command line

Every `tlmsearch` command, its arguments and options, as `tlmsearch COMMAND --help` prints them
(generated from the code by `make docs`; do not edit). `python -m tlmsearch` runs the same
command. Exit status: 0 ok, 1 a failure while running, 2 bad input (the message names the field
and the fix). The study YAML's keys: [reference.md](reference.md).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _names(param: Any) -> str:
    if _is_argument(param):
        return f"`{(param.metavar or param.name or '').upper()}`"
    names = [*param.opts, *param.secondary_opts]
    return " / ".join(f"`{n}`" for n in names)


def _default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if default is None or default is False or default in ((), []) or callable(default):
        return ""
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    return f"`{default}`"


def _type_name(annotation: Any) -> str:
    """A type annotation as --help names it: int -> integer, list[str] -> text, repeatable."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is list and args:
        return _type_name(args[0]) + ", repeatable"
    if origin is not None and args:  # X | None
        return _type_name(args[0])
    names = {str: "text", int: "integer", float: "float", Path: "path", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)).lower())


def _type(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    kind = getattr(param, "type", None)  # click's; typer >= 0.26 keeps the annotation instead
    choices = getattr(kind, "choices", None)
    if choices:
        return " \\| ".join(f"`{c}`" for c in choices)
    if kind is not None:
        name = str(getattr(kind, "name", "") or "").lower()
        return name + (", repeatable" if getattr(param, "multiple", False) else "")
    descriptor = getattr(param, "type_descriptor", None)
    return _type_name(descriptor.annotation) if descriptor is not None else ""


def _params_table(command: Any) -> list[str]:
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if not params:
        return []
    rows = ["| argument / option | type | default | what it does |", "|---|---|---|---|"]
    for p in params:
        help_ = _cell(getattr(p, "help", None) or "")
        rows.append(f"| {_names(p)} | {_type(p)} | {_default(p)} | {help_} |")
    return [*rows, ""]


def _usage(command: Any, path: list[str]) -> str:
    pieces = ["[OPTIONS]"]
    for p in command.params:
        if _is_argument(p):
            name = _names(p).strip("`")
            name += "..." if p.nargs == -1 else ""
            pieces.append(name if p.required else f"[{name}]")
    if hasattr(command, "list_commands"):
        pieces.append("COMMAND [ARGS]...")
    return " ".join([*path, *pieces])


def _command(command: Any, path: list[str]) -> list[str]:
    """The section of one command (and, for a group, of each of its subcommands)."""
    lines = [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", ""]
    help_ = (command.help or "").strip()
    if help_:
        lines += [help_.split("\f")[0].strip(), ""]
    lines += ["```", _usage(command, path), "```", "", *_params_table(command)]
    if hasattr(command, "list_commands"):  # a group: its subcommands, in the order of --help
        ctx = typer.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += _command(sub, [*path, name])
    return lines


def markdown() -> str:
    """docs/cli.md: the page, from the typer app."""
    root = typer.main.get_command(app)
    lines = [HEADER, *_command(root, ["tlmsearch"])]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Write the CLI reference (docs/cli.md).")
    ap.add_argument("--out", type=Path, help="the file to write (default: stdout)")
    args = ap.parse_args(argv)
    text = markdown()
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
