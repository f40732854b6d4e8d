"""Names as people write them: a device or model name parsed into the fields a catalog row or a
bundled config has, and matched only where exactly one row fits every field the name states.

Never a guess: a name two rows fit is refused with the candidates listed, and a stated field
(memory size, form factor, GPU-core bin, memory technology) that disagrees with the row is
refused with what the row holds. The words (brands, form factors, memory technologies,
architecture names, tune and quantisation suffixes) are data, data/name_words.csv, each with
its source; the grammar (a device count, a memory size, a core bin, version punctuation) is
here. ``DeviceIndex`` holds a catalog's names (``catalog.Catalog.name_index``; the shipped one,
``shipped_devices``, for the benchmark importers below the catalog); ``models.identify`` matches
the bundled configs through ``match_model``. This module sits below both and imports neither.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from . import _data
from .errors import UnknownNameError

WORDS_FILE = "data/name_words.csv"


@functools.lru_cache(maxsize=1)
def words() -> dict[tuple[str, str], dict[str, str]]:
    """(applies, kind) -> {word: value} from data/name_words.csv: the words of device names upper
    case, of model names lower case, as the parsers compare them; the catalog's family and kind
    names as devices.csv writes them."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for r in csv.DictReader(_data.read_text(WORDS_FILE).splitlines()):
        word = r["word"].upper() if (r["applies"], r["kind"]) in _UPPER else r["word"]
        out.setdefault((r["applies"], r["kind"]), {})[word] = r["value"]
    return out


_UPPER = {("device", k) for k in ("brand", "form_factor", "memory_type", "arch", "cooling")}


def _kind(applies: str, kind: str) -> dict[str, str]:
    return words().get((applies, kind), {})


# -- devices ----------------------------------------------------------------------------------

# "2x H100 80GB", "8 x A100"; "3070 8GB * 4", "H100 x 8"
_COUNT_LEAD = re.compile(r"^\s*(\d+)\s*[x×]\s+(?=\S)", re.I)
_COUNT_TAIL = re.compile(r"(?:\s*[*×]|\s+x)\s*(\d+)\s*$", re.I)
# "32-Core GPU", "(8-core GPU)", "40 cores"; a catalog bin's own suffix: M1_MAX_24C
_CORES = re.compile(r"\b(\d+)[-\u2010-\u2015\u2212\s]?cores?\b(?:\s*GPU)?", re.I)  # any dash (U+2011 too)
_BIN = re.compile(r"^(\d+)C$")
# "80GB", "80 GB" (not GB10, GB200: the digits come first)
_MEMORY = re.compile(r"\b(\d+(?:\.\d+)?)\s*GB\b", re.I)


@dataclasses.dataclass(frozen=True)
class DeviceName:
    """A device name split into its product words and the fields it states."""

    text: str
    words: tuple[str, ...]  # product words, brand words dropped, in order
    arch: tuple[str, ...] = ()  # architecture words among them ("BLACKWELL")
    memory_gb: Optional[float] = None
    form: Optional[str] = None
    cores: Optional[int] = None
    memory_type: Optional[str] = None
    conflict: Optional[str] = None  # two sizes or forms stated at once

    def stated(self) -> str:
        return ", ".join(_describe(self.memory_gb, self.form, self.cores, self.memory_type, False))


@dataclasses.dataclass(frozen=True)
class DeviceFields:
    """What a catalog device holds of the fields a name can state."""

    memory_gb: float
    form: Optional[str]
    cores: Optional[int]
    memory_type: Optional[str]
    arch: str
    memory_up_to: bool  # the row holds the largest of the sizes the part is sold with

    def describe(self) -> str:
        return ", ".join(_describe(self.memory_gb, self.form, self.cores, self.memory_type, self.memory_up_to))


def _describe(mem: Optional[float], form: Optional[str], cores: Optional[int], mtype: Optional[str],
              up_to: bool) -> list[str]:  # fmt: skip
    out = []
    if mem is not None:
        out.append(f"{'up to ' if up_to else ''}{mem:g} GB")
    if form:
        out.append({"sxm": "SXM", "pcie": "PCIe", "nvl": "NVL"}.get(form, form))
    if cores:
        out.append(f"{cores}-core GPU")
    if mtype:
        out.append(mtype)
    return out


def split_count(text: str) -> tuple[str, Optional[int]]:
    """A device name and the device count written with it (``"2x H100 80GB"``, ``"3070 8GB * 4"``).

    >>> split_count("3070 8GB * 4"), split_count("2x H100 80GB"), split_count("H100")
    (('3070 8GB', 4), ('H100 80GB', 2), ('H100', None))
    """
    m = _COUNT_LEAD.match(text)
    if m:
        return text[m.end() :].strip(), int(m.group(1))
    m = _COUNT_TAIL.search(text)
    if m and m.start() > 0:
        return text[: m.start()].strip(), int(m.group(1))
    return text.strip(), None


def parse_device(text: str) -> DeviceName:
    """The product words of a device name and the fields it states: memory size, form factor,
    GPU-core bin and memory technology (an importer whose file gives the cores in a column of
    their own writes them into the name: "Apple M1 Max (24-core GPU)").

    >>> d = parse_device("NVIDIA H100 SXM5 80GB")
    >>> d.words, d.memory_gb, d.form
    (('H100',), 80.0, 'sxm')
    >>> parse_device("Apple M1 Max (24-core GPU)").cores
    24
    """
    s = text.replace("_", " ")
    cores = {int(m.group(1)) for m in _CORES.finditer(s)}
    s = _CORES.sub(" ", s)
    sizes = {float(m.group(1)) for m in _MEMORY.finditer(s)}
    s = _MEMORY.sub(" ", s)
    # brand and cooling words say nothing of which part it is ("NVIDIA B300 SXM6 AC" is the B300)
    brands, forms = {**_kind("device", "brand"), **_kind("device", "cooling")}, _kind("device", "form_factor")
    mtypes, archs = _kind("device", "memory_type"), _kind("device", "arch")
    kept: list[str] = []
    arch: list[str] = []
    form: set[str] = set()
    mtype: set[str] = set()
    for w in re.split(r"[^A-Z0-9]+", s.upper()):
        if not w or w in brands:
            continue
        if w in forms:
            form.add(forms[w])
        elif w in mtypes:
            mtype.add(mtypes[w])
        elif _BIN.match(w):
            cores.add(int(w[:-1]))
        else:
            kept.append(w)
            if w in archs:
                arch.append(w)
    conflict = None
    for what, found in (("memory sizes", sizes), ("form factors", form), ("GPU-core counts", cores),
                        ("memory technologies", mtype)):  # fmt: skip
        if len(found) > 1:
            conflict = f"it states two {what} ({', '.join(sorted(str(x) for x in found))})"
    return DeviceName(
        text=text, words=tuple(kept), arch=tuple(arch), memory_gb=next(iter(sizes)) if len(sizes) == 1 else None,
        form=next(iter(form)) if len(form) == 1 else None, cores=next(iter(cores)) if len(cores) == 1 else None,
        memory_type=next(iter(mtype)) if len(mtype) == 1 else None, conflict=conflict,
    )  # fmt: skip


def stated_memory(name: str) -> Optional[float]:
    """The memory size a device name states (``"M3 Max 64GB"``: 64.0), None where it states
    none or two.

    >>> stated_memory("2x M3 Max 64GB"), stated_memory("H100 SXM")
    (64.0, None)
    """
    return parse_device(split_count(name.strip())[0]).memory_gb


def device_fields(dev: Mapping[str, Any], cores: Optional[int]) -> DeviceFields:
    """The fields of a catalog device (a row of the catalog's export) a name is checked against:
    the form factor its name says (A100_PCIE_80GB, H100_NVL), else its family's (name_words.csv)."""
    own = parse_device(str(dev["name"]))
    family, up_to = str(dev.get("family") or ""), _kind("device", "memory_up_to")
    mtype = re.match(r"[A-Z0-9]+", str(dev.get("memory_type") or "").upper())
    return DeviceFields(
        memory_gb=float(dev["memory_gb"]), form=own.form or _kind("device", "family_form_factor").get(family),
        cores=cores, memory_type=mtype.group(0) if mtype else None, arch=str(dev["arch"]),
        memory_up_to=dev["kind"] in up_to or family in up_to,
    )  # fmt: skip


def normalise(name: str) -> str:
    """A device name as the catalog keys it: upper case, runs of other characters one '_'."""
    return re.sub(r"[^A-Z0-9]+", "_", name.strip().upper()).strip("_")


@functools.lru_cache(maxsize=1)
def _gpu_cores() -> dict[str, int]:
    """Device -> its GPU cores where data/hardware/hardware_bins.csv gives them (a bin and its parent)."""
    out: dict[str, int] = {}
    for r in csv.DictReader(_data.read_text("data/hardware/hardware_bins.csv").splitlines()):
        out[r["name"]] = int(r["gpu_cores"])
        out.setdefault(r["parent"], int(r["parent_gpu_cores"]))
    return out


class DeviceIndex:
    """The names of a catalog's devices (its export: ``devices`` and ``aliases``), each parsed,
    for ``find`` (a catalog name or alias) and ``identify`` (a name as people write it)."""

    def __init__(self, export: Mapping[str, Any]) -> None:
        cores = _gpu_cores()
        self.fields = {str(d["name"]): device_fields(d, cores.get(str(d["name"]))) for d in export["devices"]}
        self.aliases = {str(a): str(n) for a, n in export["aliases"].items() if str(n) in self.fields}
        pairs = [(n, n) for n in self.fields] + list(self.aliases.items())
        self.entries = [(parse_device(a), n) for a, n in pairs]

    def find(self, name: str) -> Optional[str]:
        """The device a catalog name or alias names (in any case and punctuation), else None."""
        key = normalise(name)
        return key if key in self.fields else self.aliases.get(key)

    def identify(self, name: str, curated: Mapping[str, str]) -> tuple[str, Optional[int]]:
        """The device a name as people write it names, and the device count written with it
        (None: none): a catalog name or alias, or one of ``curated`` (a benchmark source's own
        names), with the count ("2x", "* 4") and leading brand words set aside; else the one
        device whose product words the name has and whose memory size, form factor, GPU cores
        and memory technology agree with what it states (``match_device``). Never a closest
        match: an unknown name is an UnknownNameError naming the closest."""
        body, count = split_count(name.strip())
        for s, n in ((name.strip(), None), (body, count)):
            hit = curated.get(s) or self.find(s)
            if hit is not None:
                return hit, n
        words = [w for w in re.split(r"[^A-Z0-9]+", body.upper()) if w]
        brands = _kind("device", "brand")
        while words and words[0] in brands:
            words = words[1:]
            hit = self.find("_".join(words)) if words else None
            if hit is not None:
                return hit, count
        hit = match_device(parse_device(body), self.entries, self.fields)
        if hit is not None:
            return hit, count
        key = normalise(name)
        pool = sorted(self.fields) + sorted(self.aliases)
        close = difflib.get_close_matches(key, pool, n=3, cutoff=0.5)
        if not close:
            close = [n for n in pool if key[:3] and n.startswith(key[:3])][:3]
        closest = list(dict.fromkeys(self.aliases.get(c, c) for c in close))
        hint = f"; closest: {', '.join(closest)}" if closest else ""
        raise UnknownNameError(f"unknown hardware '{name}'{hint} (see `ridgeline catalog list`)")


@functools.lru_cache(maxsize=1)
def shipped_devices() -> DeviceIndex:
    """The shipped catalog's names (its engine export, compiled in): for the benchmark importers,
    which sit below the catalog; ``catalog.Catalog.name_index`` is a catalog's own."""
    return DeviceIndex(json.loads(_data.read_text("data/hardware/engine_export.json")))


def _disagreement(given: DeviceName, d: DeviceFields) -> Optional[str]:
    if given.memory_gb is not None and not (
        given.memory_gb <= d.memory_gb if d.memory_up_to else given.memory_gb == d.memory_gb
    ):
        return "memory size"
    if given.form is not None and given.form != d.form:
        return "form factor"
    if given.cores is not None and given.cores != d.cores:
        return "GPU-core count"
    if given.memory_type is not None and given.memory_type != d.memory_type:
        return "memory technology"
    return None


_FIELDS = {"memory_gb": "memory size", "form": "form factor", "cores": "GPU cores"}


def _words_fit(given: DeviceName, entry: DeviceName, d: DeviceFields) -> bool:
    """Whether ``given`` has the product words of a catalog name or alias (``entry``): the same
    words, or those and an architecture word the entry lacks where the device is of it."""
    if entry.words == given.words:
        return True
    extra = [w for w in given.words if w in given.arch and w not in entry.words]
    archs = _kind("device", "arch")
    return tuple(w for w in given.words if w not in extra) == entry.words and all(
        d.arch.startswith(archs[w]) for w in extra
    )


def _left_out(given: DeviceName, entry: DeviceName) -> list[str]:
    """The fields the entry's own name states and ``given`` leaves out (RTX_3060_12GB's memory
    size is not in "RTX 3060": another card of that name may have another)."""
    return [what for f, what in _FIELDS.items() if getattr(entry, f) is not None and getattr(given, f) is None]


def match_device(
    given: DeviceName, entries: Sequence[tuple[DeviceName, str]], devices: Mapping[str, DeviceFields]
) -> Optional[str]:
    """The one catalog device ``given`` names among ``entries`` (each catalog name and alias,
    parsed, with its device): one whose name or an alias has its product words, states nothing
    it leaves out, and whose fields agree with what it states. None when no entry has its product
    words; a name that fits two devices, or none of those with its words, is an UnknownNameError
    listing them with why each is not it."""
    if given.conflict:
        raise UnknownNameError(
            f"hardware '{given.text}': {given.conflict}; name one device (see `ridgeline catalog list`)"
        )
    why: dict[str, Optional[str]] = {}
    for e, dev in entries:
        if not given.words or not _words_fit(given, e, devices[dev]):
            continue
        left = _left_out(given, e)
        wrong = _disagreement(given, devices[dev])
        reason = f"the {wrong} disagrees" if wrong else (f"its name states the {' and '.join(left)}" if left else None)
        if dev not in why or reason is None:
            why[dev] = reason
    agree = sorted(dev for dev, reason in why.items() if reason is None)
    if len(agree) == 1:
        return agree[0]
    if not why:
        return None
    listed = "; ".join(f"{n} ({devices[n].describe()})" + (f": {why[n]}" if why[n] else "")
                       for n in (agree or sorted(why)))  # fmt: skip
    unstated = not agree and len(why) > 1 and all(str(r).startswith("its name states") for r in why.values())
    lead = (f"is ambiguous: it names {len(agree or why)} catalog devices" if agree or unstated
            else "names none of the catalog devices of that name")  # fmt: skip
    raise UnknownNameError(f"hardware '{given.text}' {lead}: {listed}; name one (see `ridgeline catalog list`)")


# -- models -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelName:
    """A model name as tokens (organisation, tune and quantisation words dropped; version
    punctuation normalised) and the weight format its quantisation suffix states."""

    text: str
    key: tuple[str, ...]
    weight_format: Optional[str] = None
    quant_word: Optional[str] = None  # the suffix that states it, as name_words.csv spells it
    conflict: Optional[str] = None


def _tokens(text: str) -> list[str]:
    s = text.rsplit("/", 1)[-1].lower()
    s = re.sub(r"(?<=\d)[._](?=\d)", ".", s)  # Llama-3_3 / 3.3
    out: list[str] = []
    for t in re.split(r"[^a-z0-9.]+", s):
        out.extend(x for x in re.split(r"(?<!\d)\.|\.(?!\d)", t) if x)
    return [t[1:] if re.fullmatch(r"v\d[\d.]*", t) else t for t in out]  # v3.1 -> 3.1


@functools.lru_cache(maxsize=1)
def _quant_words() -> list[tuple[list[str], str, str]]:
    """(tokens, weight format, word) of each quantisation suffix, the longest first."""
    out = [(_tokens(w), fmt, w) for w, fmt in _kind("model", "quant").items()]
    return sorted(out, key=lambda x: -len(x[0]))


def parse_model(text: str) -> ModelName:
    """A model name's key and stated weight format.

    >>> parse_model("LLaMA v3.1 70B").key == parse_model("meta-llama/Llama-3.1-70B").key
    True
    >>> parse_model("Meta-Llama-3.1-8B-Instruct-FP8").weight_format
    'fp8'
    """
    toks = _tokens(text)
    found: dict[str, str] = {}
    for q, f, w in _quant_words():
        for i in range(len(toks) - len(q) + 1):
            if toks[i : i + len(q)] == q:
                toks[i : i + len(q)] = []
                found[w] = f
                break
    formats = {f for f in found.values() if f}
    drop = {*_kind("model", "org"), *_kind("model", "tune")}
    key: list[str] = []
    for t in toks:
        if t in drop:
            continue
        m = re.fullmatch(r"([a-z]{2,})(\d[\d.]*)", t)  # qwen2.5 / qwen 2.5, llama3 / llama 3
        key.extend(m.groups() if m else (t,))
    conflict = f"it states two weight formats ({', '.join(sorted(formats))})" if len(formats) > 1 else None
    fmt = next(iter(formats)) if len(formats) == 1 else None
    word = next((w for w, f in found.items() if f == fmt), None) if fmt else None
    return ModelName(text=text, key=tuple(key), weight_format=fmt, quant_word=word, conflict=conflict)


def match_model(given: ModelName, bundled: Iterable[str]) -> tuple[Optional[str], list[str]]:
    """The bundled model ``given`` names (None: none, or several) and the candidates: those with
    its key, else those whose key holds every token of it (``"gpt-oss"``: both sizes)."""
    keys = {b: parse_model(b).key for b in bundled}
    same = sorted(b for b, k in keys.items() if k == given.key)
    if len(same) == 1:
        return same[0], same
    if same:
        return None, same
    wanted = set(given.key)
    return None, sorted(b for b, k in keys.items() if wanted and wanted <= set(k))
