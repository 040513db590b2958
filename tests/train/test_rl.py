"""The RL kernel: micro-batch packing, the policy update and its aggregation modes."""

import numpy as np
import pytest
import torch

from creditflow.config import build_config
from creditflow.policy.model import load_policy
from creditflow.train.rl import Sample, pack_microbatches, policy_update, samples_from


def test_update_raises_logprob_of_positive_advantage_responses(tiny_model_dir):


    model, tok = load_policy(tiny_model_dir, "cpu")
    cfg = build_config(None, ["rl.lr=1e-2", "rl.kl_coef=0"])
    prompt = tok("######\n#P_X_#")["input_ids"]
    good, bad = tok("<action>up</action>")["input_ids"], tok("<action>left</action>")["input_ids"]

    def logp(resp):
        with torch.no_grad():
            ids = torch.tensor([prompt + resp])
            lp = torch.log_softmax(model(ids).logits[0, :-1], -1)
            return float(lp[len(prompt), resp[1]])  # the action token (the tags are shared by both)

    before_good, before_bad = logp(good), logp(bad)
    samples = [Sample(prompt, good, [0.0] * len(good), 1.0), Sample(prompt, bad, [0.0] * len(bad), -1.0)]
    for s in samples:  # behaviour log-probs = current policy (ratio 1 at the first step)
        s.old_logprobs = []
        with torch.no_grad():
            ids = torch.tensor([prompt + (good if s.advantage > 0 else bad)])
            lp = torch.log_softmax(model(ids).logits[0, :-1], -1)
        resp = s.response_ids
        s.old_logprobs = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(resp)]
    stats = policy_update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), samples, cfg, tok.pad_token_id,
                          np.random.default_rng(0))
    assert stats["train/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert logp(good) > before_good and logp(bad) < before_bad


def test_microbatch_packing_respects_token_budget():
    samples = [Sample([0] * n, [1] * 2, [0.0] * 2, 0.0) for n in (3, 10, 4, 30, 8, 8)]
    batches = pack_microbatches(samples, token_budget=40)
    assert sorted(len(s) for b in batches for s in b) == sorted(len(s) for s in samples)
    for b in batches:
        assert len(b) == 1 or max(len(s) for s in b) * len(b) <= 40


def test_traj_mean_weighs_trajectories_equally(tiny_model_dir):
    """A 3-step trajectory with A=-1 and a 1-step one with A=+1: under traj-mean the shared response gets
    zero net gradient; under token-mean the longer trajectory wins."""

    from creditflow.rollout.trajectory import Step, Trajectory

    model, tok = load_policy(tiny_model_dir, "cpu")
    prompt = tok("######\n#P_X_#")["input_ids"]
    resp = tok("<action>up</action>")["input_ids"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([prompt + resp])).logits[0, :-1], -1)
    old = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(resp)]

    def traj(n, adv):
        return Trajectory(task_id="t", steps=[Step(state="s", observation="", action="up", prompt_ids=prompt,
                                                   response_ids=resp, logprobs=old, advantage=adv)
                                              for _ in range(n)])

    samples = samples_from([traj(3, -1.0), traj(1, 1.0)])
    assert [round(s.traj_weight, 3) for s in samples] == [0.333, 0.333, 0.333, 1.0]
    grads = {}
    for agg in ("traj-mean", "token-mean"):
        m, _ = load_policy(tiny_model_dir, "cpu")
        cfg = build_config(None, ["rl.kl_coef=0", f"rl.loss_agg={agg}"])
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        policy_update(m, opt, samples_from([traj(3, -1.0), traj(1, 1.0)]), cfg, tok.pad_token_id,
                      np.random.default_rng(0))
        grads[agg] = torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]).abs().max()
    assert grads["traj-mean"] < 1e-6 < grads["token-mean"]


def test_skipping_zero_advantage_samples_leaves_the_update_unchanged(tiny_model_dir):
    """Without KL and entropy terms, zero-advantage samples are not forwarded; the weights after the
    update equal those of the full computation (forced here by a negligible entropy coefficient), including
    a mini-batch that holds only zero-advantage samples (AdamW's moments still move the weights)."""


    _, tok = load_policy(tiny_model_dir, "cpu")
    prompt = tok("######\n#P_X_#")["input_ids"]
    resp = {a: tok(f"<action>{a}</action>")["input_ids"] for a in ("up", "down", "left")}
    advs = [("up", 1.0), ("down", 0.0), ("left", -1.0), ("up", 0.0), ("down", 0.0), ("left", 0.0)]
    weights = {}
    for name, entropy_coef in (("skip", 0.0), ("full", 1e-30)):
        m, _ = load_policy(tiny_model_dir, "cpu")
        samples = []
        for a, adv in advs:
            with torch.no_grad():
                lp = torch.log_softmax(m(torch.tensor([prompt + resp[a]])).logits[0, :-1], -1)
            old = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(resp[a])]
            samples.append(Sample(prompt, resp[a], old, adv))
        cfg = build_config(None, ["rl.kl_coef=0", f"rl.entropy_coef={entropy_coef}", "rl.minibatches=3",
                                  "rl.ppo_epochs=2"])
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        policy_update(m, opt, samples, cfg, tok.pad_token_id, np.random.default_rng(1))
        weights[name] = torch.cat([p.detach().flatten() for p in m.parameters()])
    before = torch.cat([p.detach().flatten() for p in load_policy(tiny_model_dir, "cpu")[0].parameters()])
    assert (weights["full"] - before).abs().max() > 1e-3  # the update did move the weights
    torch.testing.assert_close(weights["skip"], weights["full"], atol=1e-6, rtol=0)
