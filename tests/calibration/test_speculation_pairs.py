"""The published speculative pairs against the speculation physics (validate --speculation):
every row priced or listed with its reason, a ladder's acceptance set by its first point only."""

import csv
import io

import pytest
from conftest import run
from ridgeline import _data
from ridgeline.calibration.speculation import (
    FITS,
    PAIRS,
    fit_host,
    host_parts,
    host_summary,
    predict_host,
    priced_pairs,
    summary,
)


@pytest.fixture(scope="module")
def recs():
    return priced_pairs()


def test_every_pair_row_is_priced_or_listed_with_its_reason(recs):
    rows = list(csv.DictReader(io.StringIO(_data.read_text(PAIRS))))
    assert len(recs) == len(rows) == 129
    assert all((r["predicted"] is None) != (r["reason"] is None) for r in recs)


def test_a_ladder_without_acceptance_takes_it_from_its_first_point_which_is_not_counted(recs):
    by = {r["id"]: r for r in recs}
    # the EAGLE-3 and EAGLE-1 ladders of the EAGLE-3 paper (SGLang on H100, vLLM on an RTX 3090)
    for head in ("eagle3", "eagle"):
        for first in (f"eagle3_t3_sglang_h100_bs2_{head}", f"eagle3_t5_vllm_3090_bs2_{head}"):
            r = by[first]
            assert r["predicted"] == pytest.approx(r["published"], rel=1e-6) and not r["counted"]
    # the rest of each ladder is counted, at the acceptance its first point set
    rest = [r for r in recs if r["predicted"] is not None and r["counted"]]
    assert len(rest) == 30 and all("from the ladder's first point" in r["acceptance"] for r in rest)
    s = summary(recs)
    assert s["counted"] == 30 and s["set_acceptance"] == 4
    assert sum(s["not_priced"].values()) == 129 - 34


def test_a_row_that_publishes_its_acceptance_is_priced_at_it():
    rows = list(csv.DictReader(io.StringIO(_data.read_text(PAIRS))))
    row = dict(next(r for r in rows if r["id"] == "eagle3_t3_sglang_h100_bs8_eagle3"))
    row["mean_acceptance_length"] = "3.2"
    [rec] = priced_pairs([row])
    assert rec["acceptance"] == "3.2, the row's own" and rec["counted"]
    # more kept a step than the ladder's first point gave (2.09): faster
    assert rec["predicted"] > 1.79


def test_validate_speculation_from_the_cli():
    r = run("validate", "--speculation")
    assert r.returncode == 0, r.stderr
    assert "30 of 129 rows counted" in r.stdout and "not priced" in r.stdout


def _ladder(recs, rig, head):
    def batch(r):
        return int(r["id"].split("_bs")[1].split("_")[0])

    rows = [r for r in recs if r["id"].startswith(f"eagle3_{rig}_bs") and r["id"].endswith(f"_{head}")]
    return sorted((batch(r), r["published"], r["predicted"]) for r in rows if r["predicted"] is not None)


def test_the_eagle3_ladder_on_an_rtx_3090_under_vllm_holds_to_batch_32(recs):
    # EAGLE-3 paper Table 5 (rows eagle3_t5_vllm_3090_bs{2..56}_eagle3): x1.75 at batch 2 falling to
    # x1.01 at 56. Within 20% a point to batch 32; at 48 and 56 the verification step is priced
    # 19-25% too dear (issue 45's note: the line is not met there)
    ladder = _ladder(recs, "t5_vllm_3090", "eagle3")
    assert [b for b, _, _ in ladder] == [2, 4, 8, 16, 24, 32, 48, 56]
    assert all(abs(pred / pub - 1) <= 0.20 for b, pub, pred in ladder if b <= 32)
    assert all(0.70 <= pred / pub < 0.85 for b, pub, pred in ladder if b >= 48)
    preds = [pred for _, _, pred in ladder]
    assert preds == sorted(preds, reverse=True)


def test_the_eagle3_ladder_on_an_h100_under_sglang_holds_with_the_host_time_its_overlap_no_longer_hides(recs):
    # EAGLE-3 paper Table 3 (rows eagle3_t3_sglang_h100_bs{2..64}_eagle3): x1.81 at batch 2, x1.38 at
    # 64. SGLang 0.4.4 turns its overlap scheduler off under EAGLE (pair_rigs.csv quotes its
    # server_args), so the speculating arm pays the host's per-sequence step time (83 us, fitted by
    # calibrate --speculation): within 20% at every batch; at 48-64 the published gain stops falling
    # (1.32 at 32, 1.38 at 64) where the prediction goes on falling: 10-17% under there
    ladder = _ladder(recs, "t3_sglang_h100", "eagle3")
    assert [b for b, _, _ in ladder] == [2, 4, 8, 16, 24, 32, 48, 56, 64]
    (_, pub64, pred64) = ladder[-1]
    assert pub64 == pytest.approx(1.38, abs=0.005)
    assert 0.80 <= pred64 / pub64 < 0.90
    assert all(abs(pred / pub - 1) <= 0.20 for _, pub, pred in ladder)
    # the fall from the ladder's first point to batch 64, within 25% (published 1.81 -> 1.38)
    (_, pub2, pred2) = ladder[0]
    assert abs((pred64 / pred2) / (pub64 / pub2) - 1) <= 0.25
    preds = [pred for _, _, pred in ladder]
    assert preds == sorted(preds, reverse=True)
    # without the host term the ladder falls far less: x1.65 at batch 64
    bare = _ladder(priced_pairs(host_seq_us={"sglang": 0.0}), "t3_sglang_h100", "eagle3")
    assert bare[-1][2] == pytest.approx(1.65, abs=0.02)


def test_the_fit_takes_the_affine_parts_estimate_prices_and_finds_a_planted_host_time(recs):
    parts = host_parts()
    assert {p["method"] for p in parts} == {"eagle3", "eagle"} and len(parts) == 18
    shipped = float(next(csv.DictReader(io.StringIO(_data.read_text(FITS))))["host_seq_us"])
    by = {r["id"]: r for r in recs}
    # the parts at the shipped term give validate's predictions (estimate at that step overhead)
    for p in predict_host(parts, shipped):
        assert p["predicted"] == pytest.approx(by[p["id"]]["predicted"], rel=1e-6)
    # published speed-ups made at a known term: the fit finds it
    planted = {p["id"]: p["predicted"] for p in predict_host(parts, 40.0)}
    made = [{**p, "published": planted[p["id"]] if p["id"] != p["head"] else p["published"]} for p in parts]
    assert fit_host(made) == 40.0
    s = host_summary(parts)
    assert s["host_seq_us"] == shipped and s["held_out"]["within_1_5x"] == 1.0
    assert set(s["held_out_by_method"]) == {"eagle3", "eagle"}


def test_calibrate_speculation_writes_the_shipped_fit(tmp_path):
    out = tmp_path / "speculation_fits.csv"
    r = run("calibrate", "--speculation", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == _data.read_text(FITS)
    assert "a running sequence a step" in r.stdout
