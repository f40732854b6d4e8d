"""The CLI reference (docs/cli.md), generated from the click commands themselves so it cannot drift:
``python -m ridgeline.cli.reference > docs/cli.md`` writes it, a test compares the two."""

from __future__ import annotations

from typing import Any

import click

from .group import cli

HEADER = """# CLI reference

Generated from the commands themselves by `python -m ridgeline.cli.reference > docs/cli.md`;
`tests/test_docs.py` fails when this file and the commands disagree.

Errors are one line on stderr: exit 2 for a bad input (the input, the value and what is
accepted), 3 for an unknown hardware or model name (with the closest known names), 4 for a
plan that does not fit (with the shortfall in GB), 5 when a Ray cluster cannot run the work
(`--ray`), 70 only for a bug; `ridgeline --debug ...`
shows tracebacks. Every output file is written to a temporary file and moved into place when
complete; an existing one is kept unless `--force`.
"""


def _option_row(p: click.Parameter) -> str:
    if not isinstance(p, click.Option):
        return f"| `{p.human_readable_name}` | argument |"
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    kind = "flag" if p.is_flag else (
        " \\| ".join(p.type.choices) if isinstance(p.type, click.Choice) else p.type.name.upper()
    )  # fmt: skip
    extra = []
    if p.multiple:
        extra.append("repeatable")
    if p.required:
        extra.append("required")
    if p.show_default and p.default is not None and not p.is_flag:
        extra.append(f"default {p.default}")
    text = " ".join((p.help or "").split()).replace("|", "\\|")
    said = f"{text} ({', '.join(extra)})" if extra else text
    return f"| {names} | {kind} | {said.strip()} |"


def _command(cmd: click.Command, path: list[str], out: list[str]) -> None:
    ctx = click.Context(cmd, info_name=" ".join(path))
    if isinstance(cmd, click.Group):
        if len(path) > 1:
            out += [f"## `{' '.join(path)}`", "", " ".join((cmd.help or "").split()), ""]
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _command(sub, [*path, name], out)
        return
    pieces = cmd.collect_usage_pieces(ctx)
    out += [f"{'###' if len(path) > 2 else '##'} `{' '.join(path)}`", "",
            f"    {' '.join(path)} {' '.join(pieces)}", ""]  # fmt: skip
    help_text = (cmd.help or "").split("\b")[0].strip()
    out += [" ".join(para.split()) + "\n" for para in help_text.split("\n\n") if para.strip()]
    rows = [_option_row(p) for p in cmd.get_params(ctx) if "--help" not in getattr(p, "opts", ())]
    if rows:
        out += ["| option | takes | does |", "| --- | --- | --- |", *rows, ""]


def reference() -> str:
    """docs/cli.md: every command, its usage, its help and its options with their types and defaults."""
    out: list[str] = [HEADER]
    _command(cli, ["ridgeline"], out)
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> Any:
    click.echo(reference(), nl=False)


if __name__ == "__main__":
    main()
