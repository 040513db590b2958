"""The RL update and step (trainer/rl.py): the policy update and its aggregation modes, both layouts through
one objective, and the trainer's step."""

import numpy as np
import pytest
import torch

from creditflow.config import build_config
from creditflow.policy.load import load_policy
from creditflow.trainer.forward import Forward
from creditflow.trainer.rl import policy_update
from creditflow.trainer.sequences import Sample, rows_from, samples_from, window_rows
from tests.trainer.rollouts import conversation_rollout, window_rollout


def update(model, optimizer, rows, cfg, pad_id, rng):
    """``policy_update`` as the trainer calls it for ``cfg``: its ``rl`` settings and its forward pass."""
    fwd = Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, pad_id)
    return policy_update(model, optimizer, rows, cfg.rl, fwd, rng)


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
    stats = update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), window_rows(samples), cfg,
                   tok.pad_token_id, np.random.default_rng(0))
    assert stats["train/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert logp(good) > before_good and logp(bad) < before_bad


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
        update(m, opt, window_rows(samples_from([traj(3, -1.0), traj(1, 1.0)])), cfg, tok.pad_token_id,
               np.random.default_rng(0))
        grads[agg] = torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]).abs().max()
    assert grads["traj-mean"] < 1e-6 < grads["token-mean"]


def test_skipping_zero_advantage_samples_leaves_the_update_unchanged(tiny_model_dir):
    """Without KL and entropy terms, zero-advantage samples are not forwarded; the weights after the
    update equal those of the full computation (forced here by a negligible entropy coefficient), including
    a mini-batch that holds only zero-advantage samples (AdamW's moments still move the weights).

    Equal up to float rounding: the LM head sees only the forwarded rows' trained positions, so its (tied
    embedding) gradient is summed in another order, and AdamW turns that rounding into steps of up to
    ~1e-4 on parameters whose exact gradient is ~0 (the key biases: softmax ignores a shift of all keys).
    Skipping a row with a nonzero gradient would move the weights by ~lr = 1e-2."""


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
        update(m, opt, window_rows(samples), cfg, tok.pad_token_id, np.random.default_rng(1))
        weights[name] = {n: p.detach().clone() for n, p in m.named_parameters()}
    before = dict(load_policy(tiny_model_dir, "cpu")[0].named_parameters())
    assert max((weights["full"][n] - before[n]).abs().max() for n in before) > 1e-3  # the weights moved
    for n in before:
        torch.testing.assert_close(weights["skip"][n], weights["full"][n], atol=5e-4, rtol=0, msg=n)


# -- the conversation layout: one row per trajectory, the same objective -----------------------------------

@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "traj-mean"])
def test_ppo_loss_and_gradient_are_the_same_in_both_layouts(tiny_model_dir, agg):
    """One mini-batch of the same decisions: the PPO-clip + KL loss and its gradient agree between one
    row per decision and one row per trajectory."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = conversation_rollout(model, tok, seed=1)
    out = {}
    for layout in ("window", "conversation"):
        m, _ = load_policy(tiny_model_dir, "cpu")
        rows = rows_from(trajs, layout)
        for row in rows:
            for s in row.samples:
                s.ref_logprobs = [x - 0.1 for x in s.old_logprobs]
        cfg = build_config(None, ["rl.kl_coef=0.05", "rl.entropy_coef=0.01", f"rl.loss_agg={agg}"])
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        stats = update(m, opt, rows, cfg, tok.pad_token_id, np.random.default_rng(0))
        out[layout] = stats, torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
    (s_win, g_win), (s_conv, g_conv) = out["window"], out["conversation"]
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/ratio"):
        assert s_conv[key] == pytest.approx(s_win[key], rel=1e-4, abs=1e-6), key
    assert g_win.abs().max() > 1e-4
    torch.testing.assert_close(g_conv, g_win, atol=1e-5, rtol=1e-3)


def test_conversation_layout_trains_end_to_end(tmp_path, tiny_model_dir):
    """``rollout.history=conversation`` + ``policy.template=compact`` through the train recipe, with a KL
    term so the reference log-probs run too."""
    from creditflow.errors import UserError
    from creditflow.recipes.train import run_train

    with pytest.raises(UserError, match="rollout.history"):
        build_config(None, ["rollout.history=full"])
    with pytest.raises(UserError, match="policy.template"):
        build_config(None, ["policy.template=short"])
    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=1",
                              "rollout.history=conversation", "policy.template=compact", "rl.kl_coef=0.01",
                              "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2",
                              "generation.max_new_tokens=6", "rollout.max_steps=3", "tensorboard=false"])
    _, trainer, last = run_train(cfg, log=lambda *_: None)
    assert last["train/samples"] == last["env_steps"] > 0 and last["train/kl"] >= 0
    assert np.isfinite(last["train/loss"]) and "eval/success_rate" in last
    assert trainer.train_engine.prompts.conversation and trainer.train_engine.prompts.template == "compact"



# -- policy.share_prefix: repeated rows and the shared prefix computed once, the same update ----------------

def test_shared_prefix_update_is_the_plain_update(tiny_model_dir):
    """The PPO update through ``policy.share_prefix`` equals the row-by-row one (loss, stats, weights)."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = window_rollout(model, tok, seed=2)
    out = {}
    for share in (False, True):
        m, _ = load_policy(tiny_model_dir, "cpu")
        rows = rows_from(trajs, "window")
        for row in rows:
            for s in row.samples:
                s.ref_logprobs = [x - 0.1 for x in s.old_logprobs]
        cfg = build_config(None, [f"policy.share_prefix={str(share).lower()}", "rl.kl_coef=0.05",
                                  "rl.minibatches=2", "rl.loss_agg=traj-mean"])
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        out[share] = (update(m, opt, rows, cfg, tok.pad_token_id, np.random.default_rng(0)),
                      torch.cat([p.detach().flatten() for p in m.parameters()]))
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (out[False][1] - before).abs().max() > 1e-4
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/ratio", "train/grad_norm"):
        assert out[True][0][key] == pytest.approx(out[False][0][key], rel=1e-4, abs=1e-6), key
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6, rtol=0)


def test_train_step_trains_on_the_groups_the_hooks_keep(tmp_path, tiny_model_dir):
    """The hooks see the whole rollout and return the groups to drop; the step's metrics, credit and update
    cover the kept groups only, and the rollout the hooks saw is left as it was."""
    from creditflow.recipes.train import run_train
    from creditflow.rollout.hooks import Hooks, Review

    class DropFirstGroup(Hooks):
        def after_rollout(self, step, specs, rollout):
            self.shown = list(rollout.trajectories)
            return Review({"hooks/seen": len(rollout.trajectories)}, frozenset({specs[0].group_id}))

    hooks = DropFirstGroup()
    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=1",
                              "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=1",
                              "generation.max_new_tokens=6", "rollout.max_steps=3", "tensorboard=false"])
    _, _, last = run_train(cfg, hooks=hooks, log=lambda *_: None)
    assert last["hooks/seen"] == 4 and len(hooks.shown) == 4
    assert last["train/episodes"] == 2 and last["credit/groups"] == 1
    assert last["train/samples"] == last["env_steps"] == sum(len(t) for t in hooks.shown[2:])


def test_a_train_pool_trains_and_evaluates_on_the_same_fixed_tasks(tmp_path, tiny_model_dir):
    """``env.train_pool=N``: every step's tasks are N validation seeds, distinct within the step, the same for two
    runs of one seed; the validation evaluation plays that pool. Without it, training seeds stay below it."""
    from creditflow.errors import UserError
    from creditflow.recipes.train import run_train
    from creditflow.rollout.hooks import Hooks

    class Seen(Hooks):
        def __init__(self):
            self.seeds = []

        def make_specs(self, step, fresh):
            self.seeds.append([s.seed for s in fresh])
            return fresh

    base = [f"policy.model={tiny_model_dir}", "rl.steps=3", "rollout.tasks_per_step=3", "rollout.group_size=2",
            "generation.max_new_tokens=6", "rollout.max_steps=3", "tensorboard=false", "env.eval_seed_offset=5000"]
    seen = {}
    pool = ["env.train_pool=4", "rl.eval_episodes=4"]
    for name, extra in (("a", pool), ("b", pool), ("fresh", ["rl.eval_episodes=1"])):
        hooks = Seen()
        _, trainer, _ = run_train(build_config(None, [f"out_dir={tmp_path / name}", *base, *extra]), hooks=hooks,
                                  log=lambda *_: None)
        seen[name] = hooks.seeds
        if name == "a":
            assert trainer.eval_seeds == [5000, 5001, 5002, 5003]
    assert seen["a"] == seen["b"] and len(seen["a"]) == 3
    assert all(len(set(step)) == 3 and set(step) <= {5000, 5001, 5002, 5003} for step in seen["a"])
    assert all(s < 5000 for step in seen["fresh"] for s in step)
    with pytest.raises(UserError, match="env.train_pool=2 is smaller than rollout.tasks_per_step=3"):
        run_train(build_config(None, [f"out_dir={tmp_path / 'small'}", *base, "env.train_pool=2"]), log=lambda *_: None)
    with pytest.raises(UserError, match=r"env.train_pool needs held-out envs .* \(its split option\)"):
        run_train(build_config(None, [f"out_dir={tmp_path / 'shop'}", *base, "env.train_pool=4", "env.name=webshop"]),
                  log=lambda *_: None)
