"""The golden run reproduces: refactors keep metrics and weights (see golden_run.py).

Bit-exact on a CPU with the recording machine's kernels; torch's CPU kernels differ by instruction set (AVX2
vs AVX-512 hosts of the same machine kind sum in another order), which moves floats by ~1e-7 relative. So
counts and names must match exactly, floats to 1e-5 relative, and the weights' hash where the kernels are the
same, else their absolute sum to 1e-5 relative.
"""

import json

import pytest

from tests.golden.golden_run import GOLDEN, golden_run

# metrics added after the run was recorded: new measurements, not changed behaviour
ADDED_METRICS = {"train/rollout_logprob_gap", "dist/world_size", "train/truncated_frac", "eval/truncated_frac",
                 "train/update_skipped"}


def _close(have, want) -> bool:
    if isinstance(want, float) and isinstance(have, (int, float)):
        return have == pytest.approx(want, rel=1e-5, abs=1e-9)
    return have == want


@pytest.mark.slow
def test_golden_run_is_unchanged(tmp_path):
    expected = json.loads(GOLDEN.read_text())
    got = golden_run(tmp_path)
    for leg in expected:
        for i, (want, have) in enumerate(zip(expected[leg]["metrics"], got[leg]["metrics"])):
            have = {k: v for k, v in have.items() if k not in ADDED_METRICS}
            assert have.keys() == want.keys(), f"{leg}: metrics row {i} changed its keys"
            changed = {k: (have[k], want[k]) for k in want if not _close(have[k], want[k])}
            assert not changed, f"{leg}: metrics row {i} changed (got, recorded): {changed}"
        assert len(got[leg]["metrics"]) == len(expected[leg]["metrics"])
        for key in expected[leg]:
            if key.endswith("weights"):
                have, want = got[leg][key], expected[leg][key]
                assert have["tensors"] == want["tensors"], f"{leg}: {key} changed"
                if have["sha256"] != want["sha256"]:  # other CPU kernels: the weights move by float rounding only
                    assert have["abs_sum"] == pytest.approx(want["abs_sum"], rel=1e-5), f"{leg}: {key} changed"
