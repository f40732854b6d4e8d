"""A user's files: read with a typed error naming the file, written so that nothing is lost.

Every writer goes through ``atomic_output``: the target is checked before any work (an
existing file is kept unless ``force``, a missing or read-only directory is said up front),
the output is written to a temporary file beside it and moved into place only when it is
complete, so a run that fails leaves the target byte for byte as it was. Files that a
command exists to refresh (``calibrate``'s fits, the golden snapshot) go through
``changed_files``: the same content is a no-op, a different one needs ``force``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from .errors import PlanError, RidgelineError

PathLike = Union[str, "os.PathLike[str]"]

#: How a user replaces an existing output: the CLI's flag, the Python keyword.
FORCE_HINT = "--force (CLI) or force=True (Python) replaces it"


def check_output(path: PathLike, *, force: bool, what: str = "out", hint: str = "") -> Path:
    """Refuses an output path before any work is done: an empty path, a directory, a
    missing or read-only parent directory, or (without ``force``) an existing file.

    >>> check_output("", force=False)
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: out: an empty path
    """
    s = os.fspath(path)
    if s == "":
        raise PlanError(f"{what}: an empty path")
    p = Path(s)
    try:
        if p.is_dir():
            raise PlanError(f"{what}: '{p}' is a directory; give a file path")
        exists = p.exists() or p.is_symlink()
        parent = p.parent
        parent_ok = parent.is_dir()
        parent_there = parent_ok or parent.exists()
    except OSError as e:  # a name too long for the file system, ...
        raise PlanError(f"{what}: '{p}' cannot be a file here ({e.strerror or e})") from None
    if parent_there and not parent_ok:
        raise PlanError(f"{what}: '{parent}' is a file, not a directory")
    if not parent_ok:
        raise PlanError(f"{what}: directory '{parent}' does not exist{f' ({hint})' if hint else ''}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PlanError(f"{what}: directory '{parent}' is not writable")
    if exists and not force:
        raise PlanError(f"{what}: '{p}' exists; {FORCE_HINT}")
    return p


def check_folder(path: PathLike, *, what: str) -> Path:
    """Refuses, before any work is done, a folder an output would be written into that cannot be
    one: an empty path, an existing file, a path under a file, or one whose nearest existing
    folder is not writable. The folder is not created here (a run that fails leaves nothing).

    >>> check_folder("", what="plot")
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: plot: an empty path; give a folder
    """
    s = os.fspath(path)
    if not s.strip():
        raise PlanError(f"{what}: an empty path; give a folder")
    p = Path(s)
    try:
        up = p
        while not up.exists() and up != up.parent:
            up = up.parent
        if up.exists() and not up.is_dir():
            where = "is a file" if up == p else f"is under {up}, a file"
            raise PlanError(f"{what}: {p} {where}, not a folder")
        if not os.access(up, os.W_OK | os.X_OK):
            raise PlanError(f"{what}: {up} is not writable")
    except OSError as e:
        raise PlanError(f"{what}: {p} cannot be a folder here ({e.strerror or e})") from None
    return p


def _new_file_mode(target: Path) -> int:
    """The mode the output gets: the replaced file's, else what the umask gives a new file
    (a temporary file is created 0600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask


def _publish(tmp: Path, target: Path, *, force: bool, what: str) -> None:
    if force:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)  # never replaces: a file that appeared meanwhile is kept
    except FileExistsError:
        raise PlanError(f"{what}: '{target}' appeared while writing; {FORCE_HINT}") from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise PlanError(f"{what}: '{target}' appeared while writing; {FORCE_HINT}") from None
        os.replace(tmp, target)
        return
    tmp.unlink()


@contextlib.contextmanager
def atomic_output(path: PathLike, *, force: bool, what: str = "out", hint: str = "") -> Iterator[Path]:
    """Yields a temporary path beside ``path``; when the block ends without an error it
    becomes ``path``, and on any error it is removed and ``path`` is left as it was.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_output(d / "r.csv", force=False) as tmp:
    ...     _ = tmp.write_text("a\\n1\\n")
    >>> (d / "r.csv").read_text()
    'a\\n1\\n'
    """
    import tempfile  # here: models read a user's config through this module, estimates write nothing

    target = check_output(path, force=force, what=what, hint=hint)
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=".tmp")
    except OSError as e:
        raise PlanError(f"{what}: cannot create a file in '{target.parent}' ({e.strerror or e})") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _new_file_mode(target))
        _publish(tmp, target, force=force, what=what)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def changed_files(texts: Mapping[Path, str], *, force: bool, what: str, hint: str = "") -> dict[Path, str]:
    """The files a refresh would change; refuses (before anything is written) an existing
    file whose content differs unless ``force``. A file that already holds its text is left
    alone: refreshing twice is a no-op."""
    out: dict[Path, str] = {}
    refused: list[str] = []
    for path, text in texts.items():
        p = check_output(path, force=True, what=what, hint=hint)
        try:
            same = p.read_bytes() == text.encode("utf-8")
        except FileNotFoundError:
            same = False
        except OSError:
            same = False
            if not force:
                refused.append(str(p))
                continue
        else:
            if not same and not force:
                refused.append(str(p))
                continue
        if not same:
            out[p] = text
    if refused:
        raise PlanError(
            f"{what}: {', '.join(repr(r) for r in refused)} differ{'s' if len(refused) == 1 else ''} "
            "from what would be written; pass --force to replace"
        )
    return out


def write_files(texts: Mapping[Path, str], *, what: str) -> None:
    """Writes every text to a temporary file first, then moves each into place (replacing)."""
    with contextlib.ExitStack() as stack:
        for path, text in texts.items():
            stack.enter_context(atomic_output(path, force=True, what=what)).write_text(text, encoding="utf-8")


def read_text(path: PathLike, *, what: str, error: type[RidgelineError]) -> str:
    """A user's text file, or ``error`` naming it: not found, a directory, unreadable, not UTF-8.

    >>> read_text("/no/such/grid.yaml", what="grid file", error=PlanError)
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: grid file /no/such/grid.yaml: not found
    """
    p = Path(path)
    try:
        special = p.exists() and not p.is_file() and not p.is_dir()
    except OSError:
        special = False
    if special:  # a device or a pipe (/dev/zero never ends)
        raise error(f"{what} {p}: not a regular file")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{what} {p}: not found") from None
    except IsADirectoryError:
        raise error(f"{what} {p}: a directory, not a file") from None
    except OSError as e:
        raise error(f"{what} {p}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{what} {p}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def csv_text(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Rows as CSV text with ``columns`` in that order (other keys left out), ``\n`` line ends:
    the bytes a shipped data file is compared with."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def has_table(con: Any, table: str) -> bool:
    """Whether the DuckDB connection's main schema holds ``table`` (names match in any case,
    as DuckDB's identifiers do)."""
    sql = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' AND lower(table_name) = lower(?)"
    return bool(con.execute(sql, [table]).fetchall()[0][0])


@contextlib.contextmanager
def duckdb_readonly(path: PathLike, *, what: str) -> Iterator[Optional[Any]]:
    """A read-only connection to an existing DuckDB file (None when there is no file), or a
    PlanError naming it when it is not a DuckDB database or cannot be opened."""
    import duckdb

    p = Path(path)
    if not p.exists():
        yield None
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(12)
    except OSError as e:
        raise PlanError(f"{what}: '{p}' cannot be read ({e.strerror or e})") from None
    if head[8:12] != b"DUCK":  # the magic bytes of every DuckDB file, after an 8-byte checksum
        raise PlanError(f"{what}: '{p}' is not a DuckDB database; give a .duckdb file or a new name")
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise PlanError(f"{what}: '{p}' cannot be opened as a DuckDB database ({first})") from None
    try:
        yield con
    finally:
        con.close()


#: The most values a user's YAML or JSON file may hold once its aliases are expanded, and the
#: deepest it may nest. Input bounds, not model constants: a scenario, grid or expected-changes
#: file holds tens to thousands of values; a "billion laughs" file (anchors nested nine deep in
#: 386 bytes) expands to 10^9 and would hang whatever walks it.
MAX_DOCUMENT_VALUES = 1_000_000
MAX_DOCUMENT_DEPTH = 64


def load_yaml(text: str, *, what: str, error: type[RidgelineError] = PlanError) -> Any:
    """A user's YAML (or JSON, which YAML reads) text, safely: plain data only (PyYAML's safe
    loader; merge keys ``<<: *base`` are read), and refused with ``error`` naming ``what`` where
    it is not valid YAML, nests deeper than MAX_DOCUMENT_DEPTH or expands (aliases counted each
    time they are used) to more than MAX_DOCUMENT_VALUES values.

    >>> load_yaml("base: &b {rate: 2}\\nrun: {<<: *b, tp: 2}", what="scenario")["run"] == {"rate": 2, "tp": 2}
    True
    >>> load_yaml("[[[1]]]", what="grid file")
    [[[1]]]
    """
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
        raise error(f"{what}: not valid YAML ({where}{problem})") from None
    except RecursionError:
        raise error(f"{what}: nests deeper than {MAX_DOCUMENT_DEPTH} levels") from None
    check_document(data, what=what, error=error)
    return data


def load_json(text: str, *, what: str, hint: str = "", error: type[RidgelineError] = PlanError) -> Any:
    """A user's JSON text, refused with ``error`` naming ``what`` (and the line and column, and
    ``hint``) where it is not valid JSON, and past the bounds ``check_document`` sets.

    >>> load_json('{"a": [1, 2]}', what="grid file")
    {'a': [1, 2]}
    """
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        detail = f"line {e.lineno}, column {e.colno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else str(e)
        raise error(f"{what}: not valid JSON ({detail}{f'; {hint}' if hint else ''})") from None
    check_document(data, what=what, error=error)
    return data


def check_document(data: Any, *, what: str, error: type[RidgelineError] = PlanError) -> None:
    """Refuses parsed YAML/JSON that nests deeper than MAX_DOCUMENT_DEPTH or holds more than
    MAX_DOCUMENT_VALUES values with shared parts (YAML aliases) counted each time they appear.
    The count is memoised per object, so a small file with aliases nested deep costs little."""
    sizes: dict[int, int] = {}

    def size(x: Any, depth: int) -> int:
        if depth > MAX_DOCUMENT_DEPTH:
            raise error(f"{what}: nests deeper than {MAX_DOCUMENT_DEPTH} levels")
        if not isinstance(x, (dict, list)):
            return 1
        got = sizes.get(id(x))
        if got is None:
            items = [*x.keys(), *x.values()] if isinstance(x, dict) else x
            got = 1
            for v in items:
                got += size(v, depth + 1)
                if got > MAX_DOCUMENT_VALUES:
                    break
            sizes[id(x)] = got
        if got > MAX_DOCUMENT_VALUES:
            raise error(
                f"{what}: expands to more than {MAX_DOCUMENT_VALUES} values (its aliases repeat parts many times "
                "over); write it out plainly"
            )
        return got

    size(data, 0)
