"""Launch files for a plan ridgeline priced (``--emit DIR``): the runtime's own serve command for
each instance of the plan's unit, with the flags that realise what was simulated (TP, EP,
attention DP, the scheduler's batch and token limits, the memory fraction, the context length, the
KV format and speculation), the devices each instance takes, and for a disaggregated plan the
prefill and decode pools with their KV transfer.

Every flag and configuration key written is one the runtime's CLI reference lists for the version
the calibration names (data/runtimes/launch_flags.csv: each row the flag, its help text and the
file it was read from); ``check_flags`` holds an emitted command against that list, and a test
runs it on every runtime. The scheduler's figures are the ones the simulator ran with
(data/calibration/runtime_schedulers.csv: the runtime's defaults on the device), so the launched
server and the priced one admit the same batches.

A unit's instances fill nodes of the device's scale-up domain in turn (a unit that crosses a NIC,
as the planner allows where the catalog holds one, takes several): each is given its node, its
devices on that node with ``CUDA_VISIBLE_DEVICES`` and its own port, and the script groups the
lines by node (``nodeK`` names a node's address where there are several). An instance larger than
a node is refused: it needs the runtime's multi-node launch. The plan's copies repeat the unit.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml

from . import _checks, _data
from .errors import PlanError

_FLAGS = "data/runtimes/launch_flags.csv"
#: The runtimes ridgeline writes launch files for, and the command that serves on each.
SERVE = {"vllm": "vllm serve", "sglang": "python -m sglang.launch_server", "trtllm": "trtllm-serve"}
#: The first port an instance of a unit listens on (the next instances take the ports after it);
#: a trtllm disaggregated unit's front server takes this one.
BASE_PORT = 8000

#: A KV format in ridgeline's words and in each runtime's (vLLM's --kv-cache-dtype choices,
#: SGLang's --kv-cache-dtype choices, TensorRT-LLM's kv_cache_config.dtype): fp8 is e4m3 in each.
_KV = {"fp8": {"vllm": "fp8", "sglang": "fp8_e4m3", "trtllm": "fp8"}}
#: Weight formats a runtime quantises itself at load (vLLM and SGLang --quantization fp8: online
#: per-tensor FP8 of a bf16 checkpoint); any other format is read from a pre-quantised checkpoint.
_ONLINE_QUANT = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8"}}


@functools.lru_cache(maxsize=1)
def flag_rows() -> tuple[dict[str, str], ...]:
    """The runtimes' CLI references: one row per (runtime, version, command, flag or key)."""
    return tuple(csv.DictReader(_data.read_text(_FLAGS).splitlines()))


def version(runtime: str) -> str:
    """The version of ``runtime`` whose CLI reference the launch files follow."""
    vs = {r["version"] for r in flag_rows() if r["runtime"] == runtime}
    if len(vs) != 1:
        raise PlanError(f"runtime: ridgeline writes launch files for {', '.join(SERVE)}, got {runtime!r}")
    return vs.pop()


def known(runtime: str, command: str) -> frozenset[str]:
    """The flags (or configuration keys) ``command`` of ``runtime`` takes, by its reference."""
    return frozenset(r["flag"] for r in flag_rows() if r["runtime"] == runtime and r["command"] == command)


@dataclasses.dataclass(frozen=True)
class Instance:
    """One server: its pool (``serve``, ``prefill`` or ``decode``), devices, port and command."""

    role: str
    devices: tuple[int, ...]
    port: int
    argv: tuple[str, ...]
    #: Files the command reads (TensorRT-LLM's --config YAML), by name.
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The node of the unit it runs on (0 ..); its devices are that node's.
    node: int = 0

    def line(self) -> str:
        env = f"CUDA_VISIBLE_DEVICES={','.join(map(str, self.devices))} " if self.devices else ""
        return env + " ".join(shlex.quote(a) for a in self.argv)

    def command(self, runtime: str) -> str:
        """The command this server runs, as the runtime's reference names it."""
        return "trtllm-serve disaggregated" if self.role == "front" else SERVE[runtime]

    def options(self, runtime: str) -> list[str]:
        """The flags of its command line (the words after the command's own: ``python -m ...``)."""
        return [a for a in self.argv[len(self.command(runtime).split()) :] if a.startswith("-")]


@dataclasses.dataclass(frozen=True)
class Launch:
    """A plan's launch files: the instances of one unit, the unit's copies, and the manifest."""

    runtime: str
    version: str
    copies: int
    instances: tuple[Instance, ...]
    #: The front server of a disaggregated unit (TensorRT-LLM's ``trtllm-serve disaggregated``),
    #: with its configuration file; None where the runtime leaves routing to the user's router.
    front: Optional[Instance]
    manifest: Mapping[str, Any]

    @property
    def label(self) -> str:
        return str(self.manifest["plan"])

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.manifest["notes"])

    @property
    def servers(self) -> tuple[Instance, ...]:
        """The instances, then the front server where there is one."""
        return (*self.instances, *((self.front,) if self.front else ()))

    def files(self) -> dict[str, str]:
        out = {"launch.sh": self.script(), "manifest.yaml": yaml.safe_dump(dict(self.manifest), sort_keys=False)}
        for i in self.servers:
            out.update(i.files)
        return out

    def script(self) -> str:
        nodes = 1 + max(i.node for i in self.servers)
        where = ("One unit on one node" if nodes == 1 else
                 f"One unit on {nodes} nodes: run each node's lines on that node (nodeK: its address)")  # fmt: skip
        head = [
            "#!/usr/bin/env bash",
            f"# {self.label}: {self.runtime} {self.version}, written by ridgeline (manifest.yaml holds the plan,",
            f"# its predicted figures and each flag's meaning). {where}; the plan runs "
            f"{self.copies} such unit{'s' if self.copies > 1 else ''}.",
            *(f"# {n}" for n in self.notes),
            "set -euo pipefail",
        ]  # fmt: skip
        body = []
        for k in range(nodes):
            body += ([f"# node{k}"] if nodes > 1 else []) + [i.line() + " &" for i in self.servers if i.node == k]
        return "\n".join([*head, *body, "wait", ""])

    def write(self, out_dir: Any, *, force: bool = False) -> list[Path]:
        """Writes the files under ``out_dir`` (made if missing); an existing file is kept unless ``force``."""
        d = check_emit_dir(out_dir, force=True)
        files = self.files()
        clash = [n for n in files if (d / n).exists()]
        if clash and not force:
            raise PlanError(f"emit: {d / clash[0]} exists; --force replaces it")
        try:
            d.mkdir(parents=True, exist_ok=True)
            for n, text in files.items():
                (d / n).write_text(text)
            (d / "launch.sh").chmod(0o755)
        except OSError as e:
            raise PlanError(f"emit: cannot write under '{d}' ({e.strerror or e})") from None
        return [d / n for n in files]


def check_emit_dir(out_dir: Any, subdirs: Sequence[str] = ("",), *, force: bool = False) -> Path:
    """Refuses an emit folder before any work: a path that is a file (or under one), or (without
    ``force``) one already holding launch files."""
    s = os.fspath(out_dir)
    if s == "":
        raise PlanError("emit: an empty path")
    d = Path(s)
    for p in (d, *d.parents):
        if p.exists() and not p.is_dir():
            raise PlanError(f"emit: '{p}' is a file, not a directory")
    held = [d / sub / n for sub in subdirs for n in ("launch.sh", "manifest.yaml") if (d / sub / n).exists()]
    if held and not force:
        raise PlanError(f"emit: {held[0]} exists; --force replaces it")
    return d


def check_flags(launch: Launch) -> list[str]:
    """Every flag and configuration key ``launch`` writes that its runtime's reference does not
    list, as ``command: flag`` (empty when all are listed)."""
    rt = launch.runtime
    bad = []
    for i in launch.servers:
        command = i.command(rt)
        ok = known(rt, command)
        bad += [f"{command}: {a}" for a in i.options(rt) if a not in ok]
        for j, a in enumerate(i.argv[:-1]):
            if a in ("--speculative-config", "--kv-transfer-config"):
                keys = known(rt, f"{command} {a}")
                bad += [f"{command} {a}: {k}" for k in json.loads(i.argv[j + 1]) if k not in keys]
        for name, text in i.files.items():
            kind = f"{command} -c" if i.role == "front" else f"{command} --config"
            keys = known(rt, kind)
            bad += [f"{kind} ({name}): {k}" for k in _keys(yaml.safe_load(text)) if k not in keys]
    return bad


def _keys(d: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The keys of a configuration, nested ones dotted (``kv_cache_config.dtype``); a pool's
    section of a disaggregated configuration (``context_servers``) holds the workers' keys, which
    their own files are checked for, so only its own keys (num_instances, urls) are listed."""
    out = []
    for k, v in d.items():
        out.append(prefix + k)
        if isinstance(v, Mapping):
            if k in ("context_servers", "generation_servers"):
                out += [x for x in v if x in ("num_instances", "urls")]
            else:
                out += _keys(v, prefix + k + ".")
    return out


def launch_config(model: Any, hardware: str, *, label: Optional[str] = None, copies: int = 1,
                  catalog: Any = None, **simulate_kwargs: Any) -> Launch:  # fmt: skip
    """The launch files of the plan ``simulate(model, hardware, **simulate_kwargs)`` runs: the
    simulation is run once, and its runtime, scheduler and pools are what the commands set.

    >>> lc = launch_config("meta-llama/Llama-3.1-8B", "H100_SXM", tp=2, concurrency=4, requests=8, prompt=512,
    ...                    output=32)
    >>> lc.instances[0].argv[:6]
    ('vllm', 'serve', 'meta-llama/Llama-3.1-8B', '--port', '8000', '--tensor-parallel-size')
    """
    from .serving.simulator import simulate

    kw = {k: v for k, v in simulate_kwargs.items() if v is not None}
    return launch_for(simulate(model, hardware, catalog=catalog, **kw), kw, label=label, copies=copies)


def launch_for(sim: Any, kw: Mapping[str, Any], *, label: Optional[str] = None, copies: int = 1) -> Launch:
    """The launch files of ``sim``, a ``Simulation`` run with the ``simulate`` keywords ``kw`` (its
    KV format and speculation are read from them)."""
    copies = _checks.whole("copies", copies, 1)
    rt = sim.runtime or ""
    if rt not in SERVE:
        raise PlanError(f"emit: ridgeline writes launch files for {', '.join(SERVE)}; this plan runs on "
                        f"{rt or 'no runtime'} (--runtime chooses one of those)")  # fmt: skip
    ver = version(rt)
    sched = sim.scheduler
    pools = sim.cluster["pools"]
    disagg = len(pools) == 2
    roles = ("prefill", "decode") if disagg else ("serve",)
    kv = kw.get("kv_dtype")
    if kv is not None and kv not in _KV and kv not in ("bf16", "fp16", "auto"):
        raise PlanError(f"emit: a KV cache of {kv} has no {rt} flag; ridgeline writes bf16 (the default) or fp8")
    weights = str(sim.plan["weights"])
    quant = _ONLINE_QUANT.get(rt, {}).get(weights)
    notes = []
    if weights not in ("bf16", "fp16") and quant is None:
        notes.append(f"weights {weights}: serve a checkpoint already quantised to {weights} (the runtime reads "
                     "its format from the checkpoint's config); no flag sets it")  # fmt: skip
    spec = _speculation(rt, kw)
    if spec.get("draft"):
        notes.append(f"speculation {kw['speculative']}: replace DRAFT_MODEL with the draft model's or head's "
                     "checkpoint")  # fmt: skip
    name = sim.model
    instances: list[Instance] = []
    sizes = [int(p["tp"]) * int(p["attention_dp"]) * int(p["pp"]) for p in pools]
    total = sum(int(p["instances"]) * n for p, n in zip(pools, sizes))
    width = _node_size(sim.hardware) or total  # no scale-up domain known: the unit's one node, as priced
    hosts = "nodeK" if total > width else "localhost"
    node, used, port = 0, 0, BASE_PORT + (1 if rt == "trtllm" and disagg else 0)
    for role, pool, size in zip(roles, pools, sizes):
        if size > width:
            raise PlanError(
                f"emit: an instance of {size} devices spans nodes of {width} {sim.hardware}; ridgeline "
                "writes instances that fit one node (a larger one needs the runtime's multi-node launch)"
            )
        for _ in range(int(pool["instances"])):
            if used + size > width:
                node, used = node + 1, 0
            ids = tuple(range(used, used + size))
            made = _instance(rt, name, role, pool, sched, ids, port, kv, quant, spec, len(instances), hosts)
            instances.append(dataclasses.replace(made, node=node))
            used, port = used + size, port + 1
    front = _trtllm_front(instances) if rt == "trtllm" and disagg else None
    if not disagg and len(instances) > 1:
        router = sim.cluster.get("router", "round_robin")
        notes.append(f"spread requests over the {len(instances)} instances (ports {instances[0].port}-"
                     f"{instances[-1].port}) as the simulated router did: {router}")  # fmt: skip
    if disagg and front is None:
        urls = ", ".join(f"{i.role} {_host(i, instances)}:{i.port}" for i in instances)
        notes.append(f"route each request to a prefill instance and then to a decode instance ({urls}): "
                     f"{rt} {ver} leaves prefill/decode routing to a router in front of the pools")  # fmt: skip
    q = sim.workload.get("describe", "")
    manifest = {
        "plan": label or sim.cluster.get("describe", ""), "model": name, "hardware": sim.hardware,
        "runtime": f"{rt} {ver}", "calibration": sim.calibration, "copies": copies,
        "devices_per_unit": total, "workload": q,
        "predicted": {"ttft_p90_ms": _sig(sim.ttft_s["p90"] * 1e3), "tpot_p90_ms": _sig(sim.tpot_s["p90"] * 1e3),
                      "output_tok_s_per_gpu": _sig(sim.output_tokens / sim.duration_s / total)},
        "scheduler": {k: sched[k] for k in ("max_num_batched_tokens", "max_num_seqs", "memory_fraction",
                                            "max_model_len")} | {"source": sched["source"]},
        "pools": [{"role": i.role, "node": i.node, "devices": list(i.devices), "port": i.port,
                   "command": list(i.argv)} for i in instances],
        "flags": _meanings(rt, instances, front),
        "notes": notes,
    }  # fmt: skip
    if disagg:
        manifest["kv_transfer"] = {"fabric": sim.cluster.get("kv_fabric"), **dict(sim.cluster.get("kv_link", {}))}
    if front is not None:
        manifest["front"] = {"port": BASE_PORT, "command": list(front.argv)}
    return Launch(runtime=rt, version=ver, copies=copies, instances=tuple(instances), front=front,
                  manifest=manifest)  # fmt: skip


def _sig(x: float) -> float:
    """``x`` to three significant figures, as a number (the manifest is read by programs too)."""
    return float(f"{x:.3g}")


def _speculation(rt: str, kw: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime's speculation settings for the plan's method and depth (empty without one)."""
    method = kw.get("speculative")
    if method is None:
        return {}
    k = int(kw.get("draft_tokens") or 0)
    if k < 1:
        raise PlanError("emit: speculation needs its draft depth (draft_tokens)")
    base = str(method).split(":", 1)[0]
    draft = base in ("eagle3", "draft")
    model = str(method).split(":", 1)[1] if base == "draft" and ":" in str(method) else "DRAFT_MODEL"
    if rt == "vllm":
        m = {"eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram", "draft": "draft_model"}[base]
        cfg: dict[str, Any] = {"method": m, "num_speculative_tokens": k} | ({"model": model} if draft else {})
        if base == "ngram":
            cfg["prompt_lookup_max"] = k
        return {"vllm": ["--speculative-config", json.dumps(cfg)], "draft": draft and model == "DRAFT_MODEL"}
    if rt == "sglang":
        alg = {"eagle3": "EAGLE3", "mtp": "NEXTN", "ngram": "NGRAM", "draft": "STANDALONE"}[base]
        args = ["--speculative-algorithm", alg, "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(k + 1)]  # fmt: skip
        if draft:
            args += ["--speculative-draft-model-path", model]
        return {"sglang": args, "draft": draft and model == "DRAFT_MODEL"}
    t = {"eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram", "draft": "Draft_Target"}[base]
    yc: dict[str, Any] = {"decoding_type": t}
    yc |= {"num_nextn_predict_layers": k} if base == "mtp" else {"max_draft_len": k}
    if draft:
        yc["speculative_model"] = model
    return {"trtllm": yc, "draft": draft and model == "DRAFT_MODEL"}


def _node_size(hardware: str) -> Optional[int]:
    """The devices a node of ``hardware`` holds: its scale-up domain (None where none is known)."""
    from .catalog.store import default_catalog

    domain = default_catalog().get(hardware).scaleup_domain
    return None if domain is None else int(domain)


def _host(i: Instance, instances: Sequence[Instance]) -> str:
    """Where ``i`` is reached: localhost in a unit of one node, else its node's name (nodeK)."""
    return "localhost" if all(j.node == 0 for j in instances) else f"node{i.node}"


def _instance(rt: str, model: str, role: str, pool: Mapping[str, Any], sched: Mapping[str, Any],
              devices: tuple[int, ...], port: int, kv: Optional[str], quant: Optional[str],
              spec: Mapping[str, Any], index: int, hosts: str = "localhost") -> Instance:  # fmt: skip
    """One instance's command on ``rt``, realising ``pool``'s shape and the scheduler ``sched``
    (``hosts``: nodeK where the unit spans nodes, so a server listens beyond its own node)."""
    tp, ep, adp, pp = (int(pool[k]) for k in ("tp", "ep", "attention_dp", "pp"))
    if ep > 1 and ep != tp * adp:
        raise PlanError(f"emit: EP {ep} over TP {tp} x attention DP {adp}: {rt} spreads the experts over all "
                        "the instance's devices (EP = TP x DP)")  # fmt: skip
    kvd = None if kv is None or kv not in _KV else _KV[kv][rt]
    if rt == "vllm":
        a = ["vllm", "serve", model, "--port", str(port), "--tensor-parallel-size", str(tp)]
        a += ["--pipeline-parallel-size", str(pp)] if pp > 1 else []
        a += ["--data-parallel-size", str(adp)] if adp > 1 else []
        a += ["--enable-expert-parallel"] if ep > 1 else []
        a += ["--max-num-seqs", str(sched["max_num_seqs"]), "--max-num-batched-tokens",
              str(sched["max_num_batched_tokens"]), "--gpu-memory-utilization", f"{sched['memory_fraction']:g}",
              "--max-model-len", str(sched["max_model_len"])]  # fmt: skip
        a += ["--quantization", quant] if quant else []
        a += ["--kv-cache-dtype", kvd] if kvd else []
        a += list(spec.get("vllm", []))
        if role != "serve":
            a += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
        return Instance(role, devices, port, tuple(a))
    if rt == "sglang":
        a = ["python", "-m", "sglang.launch_server", "--model-path", model, "--port", str(port),
             "--tp-size", str(tp * adp)]  # fmt: skip
        a += ["--pp-size", str(pp)] if pp > 1 else []
        a += ["--dp-size", str(adp), "--enable-dp-attention"] if adp > 1 else []
        a += ["--ep-size", str(ep)] if ep > 1 else []
        a += ["--max-running-requests", str(sched["max_num_seqs"]), "--chunked-prefill-size",
              str(sched["max_num_batched_tokens"]), "--mem-fraction-static", f"{sched['memory_fraction']:g}",
              "--context-length", str(sched["max_model_len"])]  # fmt: skip
        a += ["--quantization", quant] if quant else []
        a += ["--kv-cache-dtype", kvd] if kvd else []
        a += list(spec.get("sglang", []))
        a += ["--disaggregation-mode", role] if role != "serve" else []
        a += ["--host", "0.0.0.0"] if hosts != "localhost" else []  # it listens on 127.0.0.1 unless told
        return Instance(role, devices, port, tuple(a))
    cfg_name = f"{role}-{index}.yaml" if role != "serve" else "serve.yaml"
    cfg: dict[str, Any] = {}
    if adp > 1:
        cfg["enable_attention_dp"] = True
    kvc: dict[str, Any] = {"free_gpu_memory_fraction": float(sched["memory_fraction"])}
    if kvd:
        kvc["dtype"] = kvd
    cfg["kv_cache_config"] = kvc
    if "trtllm" in spec:
        cfg["speculative_config"] = dict(spec["trtllm"])
    if role != "serve":
        cfg["cache_transceiver_config"] = {"backend": "DEFAULT"}
    a = ["trtllm-serve", model, "--host", "localhost" if hosts == "localhost" else "0.0.0.0", "--port", str(port),
         "--backend", "pytorch",
         "--tp_size", str(tp * adp)]  # fmt: skip
    a += ["--pp_size", str(pp)] if pp > 1 else []
    a += ["--ep_size", str(ep)] if ep > 1 else []
    a += ["--max_batch_size", str(sched["max_num_seqs"]), "--max_num_tokens", str(sched["max_num_batched_tokens"]),
          "--max_seq_len", str(sched["max_model_len"]), "--config", cfg_name]  # fmt: skip
    return Instance(role, devices, port, tuple(a), {cfg_name: yaml.safe_dump(cfg, sort_keys=False)})


def _trtllm_front(instances: Sequence[Instance]) -> Instance:
    """TensorRT-LLM's disaggregated front server and its configuration: the context (prefill)
    and generation (decode) workers by URL."""
    cfg: dict[str, Any] = {"hostname": "localhost", "port": BASE_PORT, "backend": "pytorch"}
    for section, role in (("context_servers", "prefill"), ("generation_servers", "decode")):
        mine = [i for i in instances if i.role == role]
        cfg[section] = {"num_instances": len(mine), "urls": [f"{_host(i, instances)}:{i.port}" for i in mine]}
    argv = ("trtllm-serve", "disaggregated", "-c", "disagg.yaml")
    return Instance("front", (), BASE_PORT, argv, {"disagg.yaml": yaml.safe_dump(cfg, sort_keys=False)})


def _meanings(rt: str, instances: Sequence[Instance], front: Optional[Instance]) -> dict[str, str]:
    """Each flag the commands use, with its help text from the runtime's reference."""
    rows = {(r["command"], r["flag"]): r["help"] for r in flag_rows() if r["runtime"] == rt}
    out: dict[str, str] = {}
    for i in (*instances, *((front,) if front else ())):
        for a in i.options(rt):
            if (i.command(rt), a) in rows:
                out.setdefault(a, rows[(i.command(rt), a)])
    return out
