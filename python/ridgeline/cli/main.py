"""The console script's entry: every error through one handler, one line on stderr with its exit code."""

from __future__ import annotations

import sys
from typing import Optional

import click

from ..errors import RidgelineError, exit_code
from .group import cli


def _one_line(msg: str) -> str:
    return msg.replace("\r", "\\r").replace("\n", "\\n")


#: The options people reach for that name weights kept in host memory (llama.cpp's -ngl /
#: --n-gpu-layers and --n-cpu-moe, vLLM's --cpu-offload-gb), which ridgeline does not model yet.
#: The runtimes' spellings of offload (llama.cpp's --n-cpu-moe / -ngl, vLLM's --cpu-offload-gb),
#: which estimate takes as one option.
_OFFLOAD = ("--cpu-offload-gb", "--n-cpu-moe", "--cpu-moe", "--ngl", "--n-gpu-layers", "--gpu-layers",
            "--override-tensor", "--ot")  # fmt: skip
#: The runtimes' spellings of speculative decoding (vLLM's --speculative-config, SGLang's
#: --speculative-algorithm, llama.cpp's --model-draft / -md), which estimate takes as one option.
_SPECULATION = (
    "--speculative", "--speculative-config", "--speculative-algorithm", "--mtp", "--eagle", "--eagle3", "--draft",
    "--draft-model", "--model-draft", "--num-speculative-tokens", "--spec", "--ngram",
)  # fmt: skip


def _not_modelled(e: click.UsageError) -> str:
    """For an unknown option that names a feature ridgeline does not model yet, or models under
    another name, the error saying so (empty for any other error)."""
    if not isinstance(e, click.NoSuchOption):
        return ""
    if e.option_name in _SPECULATION:
        return (f"no such option {e.option_name}: speculative decoding is `ridgeline estimate --speculative "
                "eagle3|mtp|ngram|draft:MODEL --draft-tokens K [--acceptance FILE]` (simulate, sweep and "
                "recommend take the same; docs/concepts.md)")  # fmt: skip
    if e.option_name == "--max-model-len" and _command_path(e) != "simulate":
        return ("no such option --max-model-len: estimate prices one request of --prompt + --output tokens (its KV "
                "cache for exactly those); the longest sequence an instance admits is `ridgeline simulate "
                "--max-model-len`")  # fmt: skip
    if e.option_name in _OFFLOAD:
        return (f"no such option {e.option_name}: weights kept in host memory are `ridgeline estimate --offload "
                "experts:N|gpu-layers:N|stream-gb:G|auto [--host NAME]` (llama.cpp's --n-cpu-moe N is experts:N, "
                "-ngl N is gpu-layers:N, vLLM's --cpu-offload-gb G is stream-gb:G; docs/concepts.md)")  # fmt: skip
    return ""


def _command_path(e: click.UsageError) -> str:
    """The subcommand a usage error came from ("estimate", "catalog sql"), for its help hint."""
    path = e.ctx.command_path if e.ctx is not None else ""
    return path.split(" ", 1)[1] if " " in path else ""


def _as_flag(message: str, args: list[str]) -> str:
    """An error that begins with the Python name of an option of the command run
    (``kv_link_gbs: ...``) begins with its flag instead (``--kv-link-gbs: ...``)."""
    name, sep, rest = message.partition(": ")
    if not sep or not name.isidentifier():
        return message
    from .group import cli as group

    ctx = click.Context(group)
    cmd: Optional[click.Command] = group
    for a in args:  # the command and its subcommands, as written
        if a.startswith("-") or not isinstance(cmd, click.Group):
            break
        cmd = cmd.get_command(ctx, a)
        if cmd is None:
            return message
    for p in cmd.params if cmd is not None else ():
        if isinstance(p, click.Option) and p.name == name:
            return f"{p.opts[0]}: {rest}"
    return message


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: every error ends as one line on stderr with its exit code."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    nul = next((a for a in args if "\x00" in a), None)
    if nul is not None:  # no path, name or number holds one (the OS refuses it in a path)
        click.echo(f"error: argument {nul!r} holds a NUL byte; no path, name or number does", err=True)
        sys.exit(2)
    try:
        cli.main(args=args, prog_name="ridgeline", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        # one line naming the option and what it takes, not click's usage block
        if debug:
            raise
        hint = " ".join(w for w in ("ridgeline", _command_path(e), "--help") if w)
        click.echo(f"error: {_not_modelled(e) or _one_line(e.format_message())} (see `{hint}`)", err=True)
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except RidgelineError as e:
        if debug:
            raise
        # one line whatever a user's value held (a name with a newline in it), naming the flag
        click.echo(f"error: {_as_flag(_one_line(str(e)), args)}", err=True)
        sys.exit(exit_code(e))
    except BaseException as e:  # a Rust panic arrives as PanicException (a BaseException)
        if isinstance(e, (SystemExit, KeyboardInterrupt)) or debug:
            raise
        click.echo(
            f"internal error (please report): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", err=True
        )
        sys.exit(70)
