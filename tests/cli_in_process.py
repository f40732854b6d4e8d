"""The CLI's entry point run in this process, for tests of its exit codes and messages."""

import contextlib
import io


def run_main(*argv: str) -> tuple[int, str, str]:
    """``ridgeline ARGV`` through ``ridgeline.cli.main``: (exit code, stdout, stderr)."""
    from ridgeline.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()
