"""Importers for the measured rows under data/benchmarks/: each source format,
recognised by its header, becomes rows of the unified ``benchmarks`` schema
(spec 50) with the row's source kept. The files themselves stay verbatim."""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Iterable
from typing import Any, Callable, Optional

from . import _data
from .errors import CatalogError

COLUMNS = (
    "id", "source", "file", "file_hardware", "hardware", "runtime", "runtime_version", "model", "weight_quant",
    "kv_dtype", "tp", "pp", "ep", "batch", "prompt_tokens", "output_tokens", "depth", "op", "ranks", "nodes",
    "devices_per_node", "size_bytes", "metric", "value", "unit", "flags", "notes", "not_priced",
)  # fmt: skip

Row = dict[str, Any]


@functools.lru_cache(maxsize=1)
def hardware_map() -> dict[str, tuple[str, str]]:
    """File hardware names -> (catalog name, note), from data/benchmarks/hardware_map.csv."""
    text = _data.read_text("data/benchmarks/hardware_map.csv")
    return {r["file_hardware"]: (r["name"], r["note"]) for r in csv.DictReader(io.StringIO(text))}


def _row(file: str, i: int, **kw: Any) -> Row:
    out: Row = {c: None for c in COLUMNS}
    out.update(kw)
    out["id"] = f"{file.rsplit('/', 1)[-1][:-4]}:{i}"
    out["file"] = file
    name = hardware_map().get(str(kw.get("file_hardware")))
    out["hardware"] = name[0] if name else None
    return out


def _allreduce(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """op_allreduce_busbw.csv: nccl-tests / torch all_reduce bus bandwidth vs size."""
    for i, r in enumerate(rows, start=2):
        m = re.search(r"devices_per_node=(\d+)", r["interconnect"])
        ranks, nodes = int(r["num_gpus"]), int(r["num_nodes"])
        dpn = int(m.group(1)) if m else (ranks // nodes)
        yield _row(
            file, i, source=r["source"], file_hardware=r["hardware"], op="allreduce", ranks=ranks, nodes=nodes,
            devices_per_node=dpn, size_bytes=float(r["size_bytes"]), metric="allreduce_busbw_gbs",
            value=float(r["busbw_GBps"]), unit="GB/s", runtime=r["library_tool"],
            notes=f"{r['interconnect']}; {r['dtype']}; time {r['time_us']} us; {r['note']}",
        )  # fmt: skip


_COPY_KINDS = (
    ("device_to_device_bidirectional", "copy_bidirectional_gbs"),
    ("device_to_device_memcpy", "link_unidirectional_gbs"),
    ("device_to_device", "copy_gbs"),
    ("host_to_device", "host_link_gbs"),
    ("device_to_host", "host_link_gbs"),
    ("send/recv", "sendrecv_busbw_gbs"),
)


def _memory_link(file: str, rows: Iterable[dict[str, str]]) -> Iterable[Row]:
    """op_memory_link_bandwidth.csv: bandwidthTest / nvbandwidth / nccl sendrecv."""
    for i, r in enumerate(rows, start=2):
        kind = r["direction_or_kernel"]
        metric = next((m for k, m in _COPY_KINDS if kind.startswith(k)), None)
        size = float(r["transfer_size_bytes"]) if r["transfer_size_bytes"] else None
        out = _row(
            file, i, source=r["source"], file_hardware=r["hardware"], op=kind, size_bytes=size,
            metric=metric or "unknown", value=float(r["value"]), unit=r["unit"], runtime=r["test"],
            notes=r["note"], ranks=2 if metric in ("link_unidirectional_gbs", "copy_bidirectional_gbs",
                                                  "sendrecv_busbw_gbs") else None,
        )  # fmt: skip
        if metric is None:
            out["not_priced"] = f"unrecognised kernel '{kind}'"
        elif "C2C" in kind:
            out["op"] = kind
        yield out


# Header fingerprints -> importer.
FORMATS: dict[frozenset[str], Callable[[str, Iterable[dict[str, str]]], Iterable[Row]]] = {
    frozenset({"num_gpus", "num_nodes", "busbw_GBps", "size_bytes"}): _allreduce,
    frozenset({"direction_or_kernel", "transfer_size_bytes", "value", "unit"}): _memory_link,
}


def import_file(path: str, text: Optional[str] = None) -> list[Row]:
    """Rows of one benchmark file in the unified schema; the format is recognised by its header."""
    text = _data.read_text(path) if text is None else text
    reader = csv.DictReader(io.StringIO(text))
    header = set(reader.fieldnames or [])
    for keys, importer in FORMATS.items():
        if keys <= header:
            rows = list(importer(path, reader))
            for r in rows:
                if r["hardware"] is None and not r["not_priced"]:
                    r["not_priced"] = f"hardware '{r['file_hardware']}' is not mapped to a catalog device"
            return rows
    raise CatalogError(f"{path}: unrecognised benchmark format (header: {', '.join(sorted(header))})")


def shipped_rows() -> list[Row]:
    out = []
    for path in sorted(_data.list_files("data/benchmarks/")):
        if path.endswith(".csv") and not path.endswith("hardware_map.csv"):
            out.extend(import_file(path))
    return out
