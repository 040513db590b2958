"""train/rollout_logprob_gap and truncated importance sampling (rl.tis_cap) on hand-made numbers."""

import math

import pytest
import torch

from creditflow.policy.load import load_policy
from creditflow.trainer.loss import ppo_clip_objective
from creditflow.trainer.mismatch import logprob_gap, tis_weights
from creditflow.trainer.forward import Forward
from creditflow.trainer.rl import rollout_mismatch
from creditflow.trainer.sequences import Row, Sample, collate, conversation_row, window_rows


def test_tis_weights_by_hand():
    rollout = [math.log(0.5), math.log(0.2), math.log(0.9), math.log(1e-30)]
    train = [math.log(0.4), math.log(0.6), math.log(0.9), math.log(0.5)]
    # pi_train / pi_rollout = 0.8, 3 (capped at 2), 1, 5e29 (capped, no overflow)
    assert tis_weights(rollout, train, cap=2.0) == pytest.approx([0.8, 2.0, 1.0, 2.0])
    assert logprob_gap([rollout[:3]], [train[:3]]) == pytest.approx(
        (abs(math.log(0.8)) + math.log(3) + 0.0) / 3)


def test_tis_loss_is_the_truncated_importance_weighted_ppo_loss():
    """The trainer folds w into the advantage; the loss equals -w * min(r A, clip(r) A) token by token."""
    rollout = [math.log(0.5), math.log(0.2), math.log(0.9)]
    train = [math.log(0.4), math.log(0.6), math.log(0.9)]
    new = torch.tensor([[math.log(0.44), math.log(0.3), math.log(0.99)]])  # pi_theta after some update
    adv = -1.5
    w = tis_weights(rollout, train, cap=2.0)
    sample = Sample(prompt_ids=[7], response_ids=[1, 2, 3], old_logprobs=train, advantage=adv, is_weights=w)
    batch = collate(window_rows([sample]), pad_id=0, device="cpu")
    assert batch["adv"][0].tolist() == pytest.approx([adv * x for x in w])
    mask = batch["mask"]
    loss, _ = ppo_clip_objective(new, batch["old"], batch["adv"], mask, clip_low=0.2)
    for t in range(3):
        r = math.exp(new[0, t].item() - train[t])
        want = -w[t] * min(r * adv, min(max(r, 0.8), 1.2) * adv)
        assert loss[0, t].item() == pytest.approx(want, rel=1e-5)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_policy(tiny_model_dir, "cpu", "float32")


def test_check_mismatch_measures_the_gap_and_switches_to_tis(policy):
    model, _ = policy
    samples = [Sample(prompt_ids=[3, 4, 5, 6], response_ids=[7, 8, 9], old_logprobs=[0.0] * 3, advantage=1.0),
               Sample(prompt_ids=[3, 4], response_ids=[10, 11, 12, 13, 2], old_logprobs=[0.0] * 5, advantage=-1.0)]
    rows = window_rows(samples)
    fwd = Forward(pad_id=0, token_budget=64)
    exact = fwd.logprobs(model, rows)
    one_by_one = [fwd.logprobs(model, [row])[0] for row in rows]
    for a, b in zip(exact, one_by_one):
        assert a == pytest.approx(b, abs=1e-5)  # batching and padding change nothing
    offsets = [[0.1, -0.2, 0.0], [0.3, 0.0, 0.0, -0.1, 0.5]]  # the "rollout engine" is off by these
    for s, lp, off in zip(samples, exact, offsets):
        s.old_logprobs = [a + o for a, o in zip(lp, off)]
    no_tis = rollout_mismatch(model, rows, fwd, tis_cap=None)
    assert no_tis == {"train/rollout_logprob_gap": pytest.approx(1.2 / 8, abs=1e-5)}
    assert samples[0].is_weights is None
    metrics = rollout_mismatch(model, rows, fwd, tis_cap=1.2)
    assert samples[0].old_logprobs == pytest.approx(exact[0], abs=1e-6)  # ratio against the trainer
    assert samples[1].is_weights == pytest.approx([math.exp(-0.3), 1.0, 1.0, min(math.exp(0.1), 1.2), math.exp(-0.5)],
                                                  abs=1e-4)
    assert samples[0].is_weights == pytest.approx([math.exp(-0.1), 1.2, 1.0], abs=1e-4)  # exp(0.2) capped
    assert metrics["train/tis_capped_frac"] == pytest.approx(1 / 8)


def test_conversation_rows_give_each_decision_its_own_logprobs(policy):
    """A conversation row holds a trajectory's decisions; each gets the log-probs of its own tokens, the
    same as in a row of its own."""
    model, _ = policy
    first = Sample(prompt_ids=[3, 4], response_ids=[5, 6], old_logprobs=[0.0] * 2, advantage=1.0)
    second = Sample(prompt_ids=[3, 4, 5, 6, 9, 10], response_ids=[11, 12, 2], old_logprobs=[0.0] * 3, advantage=1.0)
    together = Forward(pad_id=0, token_budget=64, pad=False).logprobs(model, [conversation_row([first, second])])
    apart = Forward(pad_id=0, token_budget=64).logprobs(model, window_rows([first, second]))
    assert [len(lp) for lp in together] == [2, 3]
    for a, b in zip(together, apart):
        assert a == pytest.approx(b, abs=1e-5)


def test_rollout_mismatch_restores_the_training_mode(policy):
    model, _ = policy
    sample = Sample([3, 4], [5], [0.0], 0.0)
    model.train()
    rollout_mismatch(model, [Row([3, 4, 5], [sample])], Forward(pad_id=0, token_budget=64), tis_cap=None)
    assert model.training
    model.eval()
