"""A dataset folder: a table written as numbered Parquet parts, one per task of a run, that
DuckDB (``read_parquet('DIR/*.parquet')``) and Polars (``pl.scan_parquet('DIR/*.parquet')``)
read as one table, in part order.

Beside the parts the folder holds two files of ridgeline's own, named with a leading ``_`` as
dataset readers expect: ``_ridgeline.json``, the run's key (a hash of everything its rows depend
on: the work, the options, the ridgeline version, its data and catalog) with the part count, and
``_ridgeline_parts.jsonl``, one line per finished part (its rows, bytes and SHA-256), appended and
synced as each part lands. A part is written to a temporary file and moved into place whole, so a
run killed at any point leaves only whole parts. A rerun with the same key resumes: a part whose
file matches its line (size and SHA-256) is kept and not computed again; any other is computed
again. A folder holding another run is replaced only with ``force``; a folder holding files
ridgeline did not write is never touched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from .._io import FORCE_HINT, atomic_output
from ..errors import PlanError

HEADER = "_ridgeline.json"
LOG = "_ridgeline_parts.jsonl"
#: The format a header names, so that a later layout is never read as this one.
FORMAT = "ridgeline dataset parts v1"
_PART = re.compile(r"^part-(\d{6,})\.parquet$")
_TEMP = re.compile(r"^\.(part-\d{6,}\.parquet|_ridgeline\.json)\..*\.tmp$")


def part_name(i: int) -> str:
    """The file of part ``i`` (zero-padded, so that names sort in part order).

    >>> part_name(12)
    'part-000012.parquet'
    """
    return f"part-{i:06d}.parquet"


def run_key(spec: Mapping[str, Any]) -> str:
    """The key of a run: SHA-256 of its description as canonical JSON."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


@dataclasses.dataclass
class Folder:
    """A dataset folder opened for a run of ``parts`` parts under ``key``: ``done`` holds the
    parts already there and verified (a resumed run skips them)."""

    path: Path
    key: str
    parts: int
    spec: Mapping[str, Any]
    done: dict[int, dict[str, Any]]

    @classmethod
    def open(cls, path: str | Path, key: str, parts: int, spec: Mapping[str, Any], *, force: bool) -> Folder:
        """Claims ``path`` for the run: creates it, resumes it (same key) or, with ``force``,
        clears a run of another key; refuses anything else before any work is done."""
        p = Path(path)
        if str(path) == "":
            raise PlanError("out: an empty path")
        if p.exists() and not p.is_dir():
            raise PlanError(f"out: '{p}' is a file; a dataset is written to a folder")
        try:
            p.mkdir(parents=True, exist_ok=True)
            names = sorted(os.listdir(p))
        except OSError as e:
            raise PlanError(f"out: cannot use folder '{p}' ({e.strerror or e})") from None
        # a name ridgeline writes that holds something other than a file (a folder named like a
        # part or the header) is not ridgeline's: never removed, even with force
        foreign = [n for n in names if not (_PART.match(n) or _TEMP.match(n) or n in (HEADER, LOG))
                   or (p / n).is_symlink() or not (p / n).is_file()]  # fmt: skip
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise PlanError(f"out: folder '{p}' holds files ridgeline did not write ({shown}); give an empty or "
                            "new folder")  # fmt: skip
        header = _read_json(p / HEADER)
        ours = [n for n in names if not _TEMP.match(n)]
        same = header is not None and header.get("format") == FORMAT and header.get("key") == key
        if ours and not same:
            if not force:
                what = "another run (its grid, options or ridgeline differ)" if header else "parts of an unknown run"
                raise PlanError(f"out: folder '{p}' holds {what}; {FORCE_HINT}, or give another folder")
            for n in ours:
                (p / n).unlink()
        for n in names:
            if _TEMP.match(n):  # a run killed while writing: never a whole file
                (p / n).unlink(missing_ok=True)
        done = _verified(p, parts) if same else {}
        folder = cls(p, key, parts, spec, done)
        folder._header(complete=False)
        return folder

    def _header(self, *, complete: bool) -> None:
        body = {"format": FORMAT, "key": self.key, "parts": self.parts, "complete": complete,
                "rows": sum(d["rows"] for d in self.done.values()) if complete else None, "run": self.spec}  # fmt: skip
        with atomic_output(self.path / HEADER, force=True) as tmp:
            tmp.write_text(json.dumps(body, indent=1, sort_keys=True, default=str) + "\n")

    def write(self, i: int, rows: int, data: bytes) -> None:
        """Lays part ``i`` down whole, then records it in the log (synced)."""
        with atomic_output(self.path / part_name(i), force=True) as tmp:
            tmp.write_bytes(data)
        entry = {"part": i, "rows": rows, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        with open(self.path / LOG, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.done[i] = entry

    def finish(self) -> int:
        """Marks the run complete in its header (every part written); returns its rows."""
        missing = [i for i in range(self.parts) if i not in self.done]
        if missing:
            raise PlanError(f"out: {len(missing)} of {self.parts} parts not written (the first: {missing[0]})")
        self._header(complete=True)
        return sum(d["rows"] for d in self.done.values())

    def files(self) -> list[Path]:
        return [self.path / part_name(i) for i in range(self.parts)]


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:  # the last line of a run killed while appending may be torn
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _verified(folder: Path, parts: int) -> dict[int, dict[str, Any]]:
    """The parts whose file is whole: its size and SHA-256 those its log line recorded."""
    logged: dict[int, dict[str, Any]] = {}
    for e in _lines(folder / LOG):
        i = e.get("part")
        if isinstance(i, int) and 0 <= i < parts and isinstance(e.get("rows"), int):
            logged[i] = e  # the last line of a part rewritten wins
    done = {}
    for i, e in sorted(logged.items()):
        f = folder / part_name(i)
        try:
            if f.stat().st_size != e.get("bytes"):
                continue
            if hashlib.sha256(f.read_bytes()).hexdigest() != e.get("sha256"):
                continue
        except OSError:
            continue
        done[i] = e
    return done
