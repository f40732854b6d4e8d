"""The engine's export of the catalog (data/hardware/engine_export.json): what a cold estimate reads
instead of building the DuckDB catalog."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Optional

from .. import _data
from ..errors import CatalogError
from .sources import _fill

# What a JSON export must hold (and of which type) to be used rather than rebuilt.
_EXPORT_KEYS: dict[str, type] = {
    "devices": list, "aliases": dict, "constants": dict, "overridden": dict, "runtimes": list, "memory": dict,
}  # fmt: skip


#: The shipped data's export, compiled into the extension (``ridgeline catalog export`` writes it).
EXPORT_FILE = "data/hardware/engine_export.json"


EXPORT_COMMAND = "ridgeline catalog export --force"


def engine_export_text() -> str:
    """The shipped data's engine export, built now through DuckDB by the code that builds every
    catalog (``_fill``), as ``ridgeline catalog export`` writes it to ``EXPORT_FILE``: keys
    sorted, floats as Python writes them (the shortest text that reads back to the same double),
    one value a line, so that the same data gives the same bytes and a change reads as a diff."""
    import tempfile

    import duckdb

    con = duckdb.connect()  # in memory: nothing of the export's build stays behind
    try:
        with tempfile.TemporaryDirectory(prefix="ridgeline-export-") as work:
            export = _fill(con, Path(work))
    finally:
        con.close()
    export["generated_by"] = f"`{EXPORT_COMMAND}` from the DuckDB build of data/; regenerate, do not edit"
    return json.dumps(export, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


@functools.lru_cache(maxsize=1)
def _shipped_export() -> dict[str, Any]:
    """The shipped data's export compiled into the extension (parsed once a process)."""
    export = None
    if EXPORT_FILE in _data.list_files("data/hardware/"):
        export = _parse_export(_data.read_bytes(EXPORT_FILE))
    if export is None:
        raise CatalogError(
            f"{EXPORT_FILE} is missing from this build or unreadable; run `{EXPORT_COMMAND}` "
            "from the repository root and reinstall"
        )
    return export


def _read_export(path: Path) -> Optional[dict[str, Any]]:
    """The JSON export at ``path`` if it can be read and passes ``_parse_export``, else None."""
    try:
        data = path.read_bytes()
    except (OSError, MemoryError):
        return None
    return _parse_export(data)


def _parse_export(data: bytes) -> Optional[dict[str, Any]]:
    """The JSON export if it parses and holds every key with at least one device, else None."""
    try:
        export = json.loads(data.decode("utf-8"))
    except (ValueError, MemoryError):
        return None
    if not isinstance(export, dict) or any(not isinstance(export.get(k), t) for k, t in _EXPORT_KEYS.items()):
        return None
    devices = export["devices"]
    if not devices or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in devices):
        return None
    return export
