"""The RL kernel: micro-batch packing, the policy update and its aggregation modes."""

import numpy as np
import pytest
import torch

from creditflow.config import build_config
from creditflow.policy.model import load_policy
from creditflow.train.rl import Sample, pack_microbatches, policy_update, samples_from, window_rows


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
    stats = policy_update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), window_rows(samples), cfg,
                          tok.pad_token_id, np.random.default_rng(0))
    assert stats["train/ratio"] == pytest.approx(1.0, abs=1e-5)
    assert logp(good) > before_good and logp(bad) < before_bad


def test_microbatch_packing_respects_token_budget():
    samples = [Sample([0] * n, [1] * 2, [0.0] * 2, 0.0) for n in (3, 10, 4, 30, 8, 8)]
    batches = pack_microbatches(samples, token_budget=40)
    assert sorted(len(s) for b in batches for s in b) == sorted(len(s) for s in samples)
    for b in batches:
        assert len(b) == 1 or max(len(s) for s in b) * len(b) <= 40
    unpadded = pack_microbatches(samples, token_budget=40, pad=False)  # equal lengths only: no padding
    assert sorted(len(s) for b in unpadded for s in b) == sorted(len(s) for s in samples)
    assert all(len({len(s) for s in b}) == 1 for b in unpadded) and [len(b) for b in unpadded] == [1, 1, 2, 1, 1]


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
        policy_update(m, opt, window_rows(samples_from([traj(3, -1.0), traj(1, 1.0)])), cfg, tok.pad_token_id,
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
        policy_update(m, opt, window_rows(samples), cfg, tok.pad_token_id, np.random.default_rng(1))
        weights[name] = {n: p.detach().clone() for n, p in m.named_parameters()}
    before = dict(load_policy(tiny_model_dir, "cpu")[0].named_parameters())
    assert max((weights["full"][n] - before[n]).abs().max() for n in before) > 1e-3  # the weights moved
    for n in before:
        torch.testing.assert_close(weights["skip"][n], weights["full"][n], atol=5e-4, rtol=0, msg=n)


# -- the conversation layout: one row per trajectory, the same objective -----------------------------------

from creditflow.envs import make  # noqa: E402
from creditflow.policy.backends.base import SamplingParams  # noqa: E402
from creditflow.policy.backends.hf import HFBackend  # noqa: E402
from creditflow.policy.prompts import ChatTemplate, PromptBuilder  # noqa: E402
from creditflow.rollout.engine import RolloutEngine, TaskSpec  # noqa: E402
from creditflow.train.rl import _collate, _trained_logits, conversation_row, rows_from  # noqa: E402
from creditflow.train.loss import token_logprobs  # noqa: E402


def conversation_rollout(model, tok, seed=0):
    """Two 3-step Sokoban episodes of the (untrained) tiny policy in the conversation layout."""
    chat = ChatTemplate(tok)
    engine = RolloutEngine(HFBackend(model, tok), chat.encode, lambda: make("sokoban"),
                           PromptBuilder("sokoban", template="compact", history="conversation"),
                           SamplingParams(max_new_tokens=6), max_steps=3, chat=chat)
    torch.manual_seed(seed)
    trajs = engine.rollout([TaskSpec("sokoban/1", 1)], 2)
    for i, traj in enumerate(trajs):  # some advantages, one of them zero
        for t, step in enumerate(traj.steps):
            step.advantage = [1.0, -0.5, 0.0][t] * (1 if i == 0 else -1)
    return trajs


def test_conversation_row_is_the_prompts_and_sampled_ids_and_masks_only_them(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = conversation_rollout(model, tok)
    rows = rows_from(trajs, "conversation")
    assert len(rows) == 2
    for traj, row in zip(trajs, rows):
        steps = traj.steps
        assert len(steps) == 3
        # turn t + 1's prompt = turn t's prompt + its sampled ids + the env turn; the row is the last one
        expected, env_spans, sampled_spans = list(steps[0].prompt_ids), [], []
        for prev, step in zip(steps, steps[1:]):
            head = prev.prompt_ids + prev.response_ids
            assert step.prompt_ids[: len(head)] == head
            env_spans.append((len(head), len(step.prompt_ids)))
        for step in steps:
            sampled_spans.append((len(step.prompt_ids), len(step.prompt_ids) + len(step.response_ids)))
        for (lo, hi), step in zip(sampled_spans, steps):
            expected[lo:] = step.response_ids
            if step is not steps[-1]:
                expected += steps[steps.index(step) + 1].prompt_ids[hi:]
        assert row.ids == expected == steps[-1].prompt_ids + steps[-1].response_ids
        for lo, hi in env_spans:  # the env turn shows the next observation as a user turn
            assert "user" in tok.decode(row.ids[lo:hi]) and "Step" in tok.decode(row.ids[lo:hi])
        # the loss mask covers exactly the sampled tokens (position t predicts token t + 1)
        b = _collate([row], tok.pad_token_id, "cpu")
        trained = {int(t) + 1 for t in b["mask"][0].nonzero()}
        assert trained == {j for lo, hi in sampled_spans for j in range(lo, hi)}
        old = {j + 1: float(b["old"][0, j]) for j in range(b["mask"].shape[1]) if b["mask"][0, j]}
        assert [old[j] for lo, hi in sampled_spans for j in range(lo, hi)] == pytest.approx(
            [x for s in steps for x in s.logprobs])


def test_conversation_row_rejects_steps_that_do_not_extend_each_other(tiny_model_dir):
    _, tok = load_policy(tiny_model_dir, "cpu")
    a, b = Sample([1, 2, 3], [4], [0.0], 1.0), Sample([1, 2, 9, 4, 5], [6], [0.0], 1.0)
    with pytest.raises(ValueError, match="prefix"):
        conversation_row([a, b])


def test_layouts_score_the_same_tokens_the_same(tiny_model_dir):
    """Fixed batch: each decision scored in its own row (window rows) and all of a trajectory's decisions
    scored in one conversation row give the same per-token log-probs when the contexts are the same."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = conversation_rollout(model, tok)
    conversation = rows_from(trajs, "conversation")
    window = window_rows([s for row in conversation for s in row.samples])
    with torch.no_grad():
        scored = {}
        for name, rows in (("window", window), ("conversation", conversation)):
            b = _collate(rows, tok.pad_token_id, "cpu")
            logits, targets = _trained_logits(model, b)
            scored[name] = token_logprobs(logits, targets)  # row-major: the same decision order in both
    torch.testing.assert_close(scored["conversation"], scored["window"], atol=1e-5, rtol=0)
    # and the behaviour log-probs of generation agree with the training forward
    behaviour = torch.tensor([x for row in conversation for s in row.samples for x in s.old_logprobs])
    torch.testing.assert_close(scored["conversation"], behaviour, atol=1e-4, rtol=0)


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
        stats = policy_update(m, opt, rows, cfg, tok.pad_token_id, np.random.default_rng(0))
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


# -- policy.share_prefix: repeated rows and the shared prefix computed once, the same loss and gradient ----

def window_rollout(model, tok, seed=0, group=4):
    """A group of 4-step Sokoban episodes of one level in the window + paper layout: the first turns
    repeat one prompt, and every prompt starts with the template's instruction."""
    chat = ChatTemplate(tok)
    engine = RolloutEngine(HFBackend(model, tok), chat.encode, lambda: make("sokoban"), PromptBuilder("sokoban"),
                           SamplingParams(max_new_tokens=6), max_steps=4, chat=chat)
    torch.manual_seed(seed)
    trajs = engine.rollout([TaskSpec("sokoban/3", 3)], group)
    for i, traj in enumerate(trajs):
        for t, step in enumerate(traj.steps):
            step.advantage = (-1.0) ** (i + t) * (t + 1) / 4
    return trajs


def test_prefix_levels_cut_the_prefix_tree_where_it_saves_most():
    """Four sorted rows of width 10: rows 1-2 and 3-4 share 6 tokens, rows 2-3 share 2. Level-by-level
    positions: [0, 2, 6, 10] computes 1*2 + 2*4 + 4*4 = 26, [0, 6, 10] 2*6 + 4*4 = 28, [0, 10] 4*10 = 40."""
    from creditflow.train.rl import prefix_levels

    lcp = torch.tensor([6, 2, 6])
    assert prefix_levels(10, lcp, level_cost=0) == [0, 2, 6, 10]
    assert prefix_levels(10, lcp, level_cost=3) == [0, 6, 10]  # 26 + 9 > 28 + 6
    assert prefix_levels(10, lcp, level_cost=13) == [0, 10]  # 40 + 13 < 28 + 26
    assert prefix_levels(10, lcp, max_levels=2, level_cost=0) == [0, 6, 10]
    assert prefix_levels(10, lcp, max_levels=1, level_cost=0) == [0, 10]
    assert prefix_levels(10, torch.tensor([], dtype=torch.long)) == [0, 10]  # one distinct row


def test_shared_prefix_forward_gives_the_same_hidden_states_and_gradients(tiny_model_dir):
    from creditflow.train.rl import _adjacent_lcp, _trained_hidden, prefix_levels

    model, tok = load_policy(tiny_model_dir, "cpu")
    rows = rows_from(window_rollout(model, tok), "window")
    rows.append(rows[0])  # an exact duplicate row
    b = _collate(rows, tok.pad_token_id, "cpu")
    keep = b["mask"].bool()
    distinct = torch.unique(torch.where(b["attn"].bool(), b["ids"], -1), dim=0)
    cuts = prefix_levels(distinct.shape[1], _adjacent_lcp(distinct))
    assert len(cuts) >= 3 and cuts[1] >= 16  # at least the instruction the template starts with is shared
    out = {}
    for share in (False, True):
        model.zero_grad()
        hidden = _trained_hidden(model.get_decoder(), b["ids"], b["attn"], keep, share)
        weights = torch.linspace(-1, 1, hidden.numel()).reshape(hidden.shape)
        (hidden * weights).sum().backward()
        out[share] = hidden.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert out[True][0].shape == (int(keep.sum()), model.config.hidden_size)
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=0)
    assert out[False][1].abs().max() > 1e-3
    # float32 rounding of sums in another order: relative to the gradient's size (max ~100 here)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6 * float(out[False][1].abs().max()), rtol=1e-4)


def test_prefix_tree_forward_is_exact_where_trained_tokens_are_shared(tiny_model_dir):
    """Rows that share prefixes of many lengths, with trained positions inside the shared spans (the
    conversation layout's group rows whose first turns agree), padding and a duplicate: the level-by-level
    forward gives every position's hidden state and the gradients of the row-by-row one."""
    from creditflow.train.rl import _adjacent_lcp, _trained_hidden, prefix_levels

    model, _ = load_policy(tiny_model_dir, "cpu")
    g = torch.Generator().manual_seed(0)
    trunk = torch.randint(5, 300, (90,), generator=g)
    rows = []
    for split, length in [(90, 90), (60, 85), (60, 88), (30, 70), (30, 90), (5, 40), (60, 85)]:
        own = torch.randint(5, 300, (length,), generator=g)
        rows.append(torch.cat([trunk[:split], own[split:]]) if split < length else trunk[:length].clone())
    rows[-1] = rows[1].clone()  # a duplicate
    ids = torch.zeros(len(rows), 90, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = r, 1
    keep = attn[:, 1:].bool() & (torch.rand(attn[:, 1:].shape, generator=g) < 0.5)
    distinct = torch.unique(torch.where(attn.bool(), ids, -1), dim=0)
    assert len(prefix_levels(90, _adjacent_lcp(distinct))) >= 4  # three levels or more
    out = {}
    for share in (False, True):
        model.zero_grad()
        hidden = _trained_hidden(model.get_decoder(), ids, attn, keep, share)
        (hidden * torch.linspace(-1, 1, hidden.numel()).reshape(hidden.shape)).sum().backward()
        out[share] = hidden.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=0)
    assert out[False][1].abs().max() > 1e-3
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6 * float(out[False][1].abs().max()), rtol=1e-4)


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
        out[share] = (policy_update(m, opt, rows, cfg, tok.pad_token_id, np.random.default_rng(0)),
                      torch.cat([p.detach().flatten() for p in m.parameters()]))
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (out[False][1] - before).abs().max() > 1e-4
    for key in ("train/loss", "train/pg_loss", "train/kl", "train/ratio", "train/grad_norm"):
        assert out[True][0][key] == pytest.approx(out[False][0][key], rel=1e-4, abs=1e-6), key
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6, rtol=0)
