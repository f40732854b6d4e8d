"""The published speculative pairs against the speculation physics (validate --speculation):
every row priced or listed with its reason, a ladder's acceptance set by its first point only."""

import csv
import io

import pytest
from conftest import run
from ridgeline import _data
from ridgeline.calibration.speculation import PAIRS, priced_pairs, summary


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
