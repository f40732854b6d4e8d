"""The ``ridgeline`` command group every command module adds its commands to, and what they share."""

from __future__ import annotations

import importlib
from typing import Any, Optional

import click

GB = 1e9

#: Each command and the module that adds it: a command's module is imported when the command
#: runs (or is listed), so ``ridgeline estimate`` reads the estimate command alone.
#: tests/cli/test_cli.py checks it against the commands the modules add.
COMMANDS = {
    "calibrate": "calibration", "catalog": "catalog", "collective": "collective", "estimate": "estimate",
    "model": "models", "plan": "plan", "plot": "plot", "recommend": "recommend", "simulate": "simulate",
    "snapshot": "snapshot",
    "sweep": "sweep", "validate": "calibration",
}  # fmt: skip


class _LazyGroup(click.Group):
    """A group whose commands are added by their modules when first asked for (click's own
    pattern for a large CLI: the cold start pays for one command, not all of them)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[Optional[str], Optional[click.Command], list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            load_all()  # an unknown name: every command loaded, so the error can name the closest
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in self.commands and name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[name]}")
        return super().get_command(ctx, name)


def load_all() -> Any:
    """Every command module imported (the reference and the tests read the whole CLI)."""
    for module in sorted(set(COMMANDS.values())):
        importlib.import_module(f"{__package__}.{module}")
    return cli


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ridgeline", prog_name="ridgeline", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """ridgeline: how fast, how big and how costly is model M on hardware H under plan P."""
    ctx.obj = {"debug": debug}


def _ray_backend(ray_address: Optional[str]) -> str:
    """The backend an ``--ray`` gives; with one, Ray is importable (else how to install it, exit 2)."""
    if ray_address is None:
        return "local"
    from ..sweeps.cluster import import_ray

    import_ray()
    return "ray"
