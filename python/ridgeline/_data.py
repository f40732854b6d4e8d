"""Access to the data/ and queries/ files compiled into the extension."""

from __future__ import annotations

import functools

from . import _core


@functools.lru_cache(maxsize=1)
def _files() -> tuple[str, ...]:
    return tuple(_core.data_files())


def list_files(prefix: str) -> list[str]:
    return [p for p in _files() if p.startswith(prefix)]


def read_bytes(path: str) -> bytes:
    return bytes(_core.data_file(path))


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def query(name: str) -> str:
    """The SQL of ``queries/<name>.sql``."""
    return read_text(f"queries/{name}.sql")


def data_hash() -> str:
    return str(_core.data_hash())
