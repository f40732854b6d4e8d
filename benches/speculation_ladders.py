"""The published EAGLE-3 batch ladders against ridgeline's speculation physics (issue 45): how the
speed-up of an EAGLE-3 head over plain decode falls as the batch grows.

    python benches/speculation_ladders.py [--prompt 128 --output 512]

The ladders (data/speculation/speculative_pairs.csv, the EAGLE-3 paper's Tables 3 and 5):
Llama-3.1-8B-Instruct with its EAGLE-3 head, a chain of 3 draft tokens under SGLang 0.4.4 on an
H100 (batch 2-64), and of 2 under vLLM on an RTX 3090 (batch 2-56), on MT-Bench. Neither table
states the acceptance length nor the prompt and output lengths:

- the acceptance length is taken from each ladder's first point (the one that makes the
  predicted speed-up equal the published one there) and held for the rest of the ladder: the
  remaining points then test only how the step's cost grows with the batch, the physics;
- the lengths are this script's arguments (MT-Bench's are not stated by the paper): say which
  you ran with.

The H100 is priced as the catalog's H100_SXM (the paper says H100), with each runtime's
shipped calibration; a point whose batch does not fit the device is listed as such. A rig whose
runtime turns its overlap off under speculation (data/speculation/pair_rigs.csv: SGLang 0.4.4)
pays the host time a running sequence a speculating step of data/calibration/speculation_fits.csv
in its speculating arm, as ``ridgeline validate --speculation`` prices it.
"""

import argparse
import csv
import tempfile
from pathlib import Path

import ridgeline
from ridgeline.calibration.speculation import shipped_host_terms
from ridgeline.errors import DoesNotFitError
from scipy.optimize import brentq

DATA = Path(__file__).resolve().parents[1] / "data"
PAIRS = DATA / "speculation" / "speculative_pairs.csv"
MODEL = "meta-llama/Llama-3.1-8B"
#: (runtime in the file, hardware in the file) -> (ridgeline runtime, catalog device)
RIGS = {("SGLang", "single H100"): ("sglang", "H100_SXM"), ("vLLM", "RTX3090"): ("vllm", "RTX_3090")}


def ladders() -> dict[tuple[str, str], tuple[int, dict[int, float]]]:
    """Each rig's EAGLE-3 ladder: (draft tokens, batch -> published speed-up)."""
    out: dict[tuple[str, str], tuple[int, dict[int, float]]] = {}
    for r in csv.DictReader(PAIRS.open()):
        rig = (r["runtime"], r["hardware"])
        if r["method"] == "eagle3" and rig in RIGS and r["draft_tokens"]:
            _, points = out.setdefault(RIGS[rig], (int(r["draft_tokens"]), {}))
            points[int(r["batch_or_concurrency"])] = float(r["speedup"])
    return out


def host_seq_us(runtime: str, hw: str) -> float | None:
    """The speculating arm's host time a running sequence a step where the rig turns its overlap off."""
    rigs = [r for r in csv.DictReader((DATA / "speculation" / "pair_rigs.csv").open())
            if (r["ridgeline_runtime"], r["device"]) == (runtime, hw) and r["spec_overlap"] == "off"]  # fmt: skip
    return shipped_host_terms()[runtime] if rigs else None


def speed_up(batch: int, al: float, k: int, runtime: str, hw: str, prompt: int, output: int) -> float:
    per_seq = host_seq_us(runtime, hw)
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        f.write(f"depth,acceptance_length\n{k},{al}\n")
        f.flush()
        kw = {"batch": batch, "prompt": prompt, "output": output, "runtime": runtime}
        base = ridgeline.estimate(MODEL, hw, **kw)
        spec = ridgeline.estimate(MODEL, hw, speculative="eagle3", draft_tokens=k, acceptance=f.name,
                                  step_overhead_us=None if per_seq is None else per_seq * batch, **kw)  # fmt: skip
    return base.tpot_s / spec.tpot_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens a request (not stated by the source)")
    ap.add_argument("--output", type=int, default=512, help="output tokens a request (not stated by the source)")
    a = ap.parse_args()
    for (runtime, hw), (k, points) in ladders().items():
        first = min(points)

        def gap(x: float, b: int = first, k: int = k, runtime: str = runtime, hw: str = hw,
                want: float = points[first]) -> float:  # fmt: skip
            return speed_up(b, x, k, runtime, hw, a.prompt, a.output) - want

        al = brentq(gap, 1.0, k + 1.0)
        print(f"{runtime} on {hw}, {k} draft tokens, prompt {a.prompt}, output {a.output}: acceptance length "
              f"{al:.3f} (from batch {first})")  # fmt: skip
        print("  batch  published  predicted  predicted/published")
        for b, v in sorted(points.items()):
            try:
                p = speed_up(b, al, k, runtime, hw, a.prompt, a.output)
            except DoesNotFitError:
                print(f"  {b:5d}  {v:9.2f}  does not fit")
                continue
            print(f"  {b:5d}  {v:9.2f}  {p:9.2f}  {p / v:9.2f}")
        last = max(points)
        try:
            fall = speed_up(last, al, k, runtime, hw, a.prompt, a.output) / points[first]
            print(f"  fall from batch {first} to {last}: published {points[last] / points[first]:.2f}, "
                  f"predicted {fall:.2f}")  # fmt: skip
        except DoesNotFitError:
            pass


if __name__ == "__main__":
    main()
