"""Training rows (trainer/sequences.py): layouts, packing and collation, and the per-step credit regression tests
the field keeps needing (issue 61, part 4), for creditflow's own trainer:

* a step's advantage lands on exactly its own response tokens, never on prompt, environment or padding tokens;
* no step of a multi-step trajectory trains with zero advantage unless its estimator says so;
* padding and duplicated rows change nothing.
"""

import copy

import numpy as np
import pytest
import torch

from creditflow import credit
from creditflow.config import build_config
from creditflow.policy.load import load_policy
from creditflow.rollout.trajectory import Step, Trajectory
from creditflow.trainer.forward import Forward
from creditflow.trainer.loss import ppo_clip_objective
from creditflow.trainer.rl import policy_update
from creditflow.trainer.sequences import (Sample, collate, conversation_row, decisions, pack_microbatches, rows_from,
                                   window_rows)
from tests.trainer.rollouts import conversation_rollout, window_rollout


def test_microbatch_packing_respects_token_budget():
    samples = [Sample([0] * n, [1] * 2, [0.0] * 2, 0.0) for n in (3, 10, 4, 30, 8, 8)]
    batches = pack_microbatches(samples, token_budget=40)
    assert sorted(len(s) for b in batches for s in b) == sorted(len(s) for s in samples)
    for b in batches:
        assert len(b) == 1 or max(len(s) for s in b) * len(b) <= 40
    unpadded = pack_microbatches(samples, token_budget=40, pad=False)  # equal lengths only: no padding
    assert sorted(len(s) for b in unpadded for s in b) == sorted(len(s) for s in samples)
    assert all(len({len(s) for s in b}) == 1 for b in unpadded) and [len(b) for b in unpadded] == [1, 1, 2, 1, 1]


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
        b = collate([row], tok.pad_token_id, "cpu")
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




# -- issue 61, part 4: per-step credit reaches exactly the tokens it belongs to --------------------------------

def rollout_in(layout, model, tok):
    """Real rollouts of the tiny policy: window rows (one per decision) or conversation rows, whose prompts
    hold the environment's turns between the sampled responses. Every step gets its own advantage."""
    trajs = window_rollout(model, tok) if layout == "window" else conversation_rollout(model, tok)
    for i, traj in enumerate(trajs):
        for t, step in enumerate(traj.steps):
            step.advantage = (-1.0) ** t * (1 + t + 10 * i)  # distinct and nonzero: a misplaced one shows
    return trajs


@pytest.mark.parametrize("layout", ["window", "conversation"])
def test_a_steps_advantage_lands_on_exactly_its_own_response_tokens(tiny_model_dir, layout):
    """In one padded micro-batch of every row: the advantage (and the loss mask) at each position is that of the
    step whose sampled token it predicts, 0 on prompt, environment and padding positions; the PPO objective's
    gradient (ratio 1) is -A on exactly those tokens."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    rows = rows_from(rollout_in(layout, model, tok), layout)
    if layout == "conversation":  # and the row of a trajectory that ended a step earlier: a shorter row
        shorter = [copy.deepcopy(s) for s in rows[0].samples[:2]]
        for s in shorter:
            s.advantage += 0.5
        rows.append(conversation_row(shorter))
    assert len({len(row) for row in rows}) > 1  # rows of several lengths: the batch is padded
    b = collate(rows, tok.pad_token_id, "cpu")
    want = torch.zeros_like(b["adv"])
    for i, row in enumerate(rows):
        for s in row.samples:
            lo = len(s.prompt_ids)  # position p predicts token p + 1
            want[i, lo - 1: lo - 1 + len(s.response_ids)] = s.advantage
            assert row.ids[lo: lo + len(s.response_ids)] == s.response_ids
    assert sorted(set(want[want != 0].tolist())) == sorted({s.advantage for s in decisions(rows)})
    assert torch.equal(b["adv"], want)
    assert torch.equal(b["mask"], (want != 0).float())  # nothing else is trained: not the prompt, env or padding
    assert int(b["mask"].sum()) == sum(len(s.response_ids) for s in decisions(rows))
    if layout == "conversation":  # environment turns sit between the responses, untrained
        assert any(len(s.prompt_ids) > len(prev.prompt_ids) + len(prev.response_ids)
                   for row in rows for prev, s in zip(row.samples, row.samples[1:]))
    logp = b["old"].clone().requires_grad_(True)
    loss, _ = ppo_clip_objective(logp, b["old"], b["adv"], b["mask"], clip_low=0.2)
    loss.sum().backward()
    assert torch.equal(logp.grad, -want)


def credit_group(name: str) -> list[Trajectory]:
    """Two groups of four 2-4 step trajectories over shared states (s0, s1 are visited by several), outcome
    reward at the end, with token ids in the conversation layout (each prompt extends the previous turn by its
    response and an environment turn), as the engine records them."""
    paths = [  # states s_0 .. s_T, success
        (["s0", "s1", "s2", "goal"], True), (["s0", "s1", "s3", "s3", "s3"], False),
        (["s0", "s4", "s1", "s2", "goal"], True), (["s0", "s4", "s5"], False),
    ]
    trajs = []
    for g in range(2):
        for k, (states, success) in enumerate(paths if g == 0 else paths[::-1]):
            prompt, steps = [1, 2], []
            for t in range(len(states) - 1):
                response = [100 + 10 * k + t, 3]
                steps.append(Step(state=states[t], observation=states[t], action=f"{states[t]}->{states[t + 1]}",
                                  next_state=states[t + 1], reward=float(success and t == len(states) - 2),
                                  prompt_ids=list(prompt), response_ids=response, logprobs=[-0.5, -0.1]))
                prompt = prompt + response + [4, 50 + t]  # the env's next observation as a user turn
            trajs.append(Trajectory(task_id=f"task{g}", group_id=f"{name}/g{g}", traj_id=f"{name}/g{g}/{k}",
                                    steps=steps, final_state=states[-1], success=success,
                                    score=float(success)))
    return trajs


@pytest.mark.parametrize("layout", ["window", "conversation"])
@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "rewardflow"])
def test_no_step_trains_with_zero_advantage_unless_its_estimator_says_so(name, layout):
    """The trainer's credit path (the estimator in place, then the rows) puts on every step's tokens the
    advantage ``credit.score`` gives that step: zero only where the estimator says zero. Trajectory-level
    estimators give every step of a trajectory its advantage, not only the last; step-level ones differ
    within a trajectory."""
    trajs = credit_group(name)
    scored = credit.score(copy.deepcopy(trajs), name)  # the public path: what each step should get
    credit.get_estimator(name)(trajs, credit.validate_knobs(name, {}))  # what RLTrainer.train_step runs
    rows = rows_from(trajs, layout)
    b = collate(rows, 0, "cpu")
    want = [step.advantage for traj in scored for step in traj.steps]
    got = []
    for i, row in enumerate(rows):
        for s in row.samples:
            lo = len(s.prompt_ids) - 1
            tokens = b["adv"][i, lo: lo + len(s.response_ids)]
            assert torch.all(tokens == tokens[0]) and bool(b["mask"][i, lo: lo + len(s.response_ids)].all())
            got.append(float(tokens[0]))
    assert got == pytest.approx(want, abs=1e-6)
    assert [a == 0 for a in got] == [a == 0 for a in want]
    per_traj = [[step.advantage for step in traj.steps] for traj in scored]
    assert sum(a != 0 for a in want) > len(want) // 2  # most steps carry credit
    if name in ("grpo", "rloo"):  # one advantage per trajectory, on every one of its steps
        assert all(len(set(advs)) == 1 and advs[0] != 0 for advs in per_traj)
    else:  # per-step credit: steps of one trajectory differ
        assert any(len(set(advs)) > 1 for advs in per_traj)


def test_padding_and_duplicated_rows_change_no_decisions_logprobs(tiny_model_dir):
    """Every decision's log-probs are the same whether its row is padded into a micro-batch with longer rows,
    alone in one, packed with equal lengths only, or computed once for several duplicates (share_prefix);
    a duplicate gets exactly its original's."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    rows = rows_from(window_rollout(model, tok), "window")
    original = rows[0]
    rows.append(window_rows([copy.deepcopy(original.samples[0])])[0])  # an exact duplicate, its own objects
    model.eval()
    ways = {"padded": Forward(tok.pad_token_id, 1 << 16), "row by row": Forward(tok.pad_token_id, 64),
            "equal lengths": Forward(tok.pad_token_id, 1 << 16, pad=False),
            "no sharing": Forward(tok.pad_token_id, 1 << 16, share_prefix=False)}
    assert len(pack_microbatches(rows, 1 << 16)) == 1 and len({len(r) for r in rows}) > 1
    got = {way: fwd.logprobs(model, rows) for way, fwd in ways.items()}
    for way, lps in got.items():
        assert lps[-1] == lps[0], way  # the duplicate: bit for bit its original
        for a, b in zip(lps, got["row by row"]):
            assert a == pytest.approx(b, abs=1e-5), way


@pytest.mark.slow
def test_padding_and_duplicated_rows_change_no_update(tiny_model_dir):
    """The same rows, one with a duplicate: the update (stats and weights) is the same however they are packed
    (padded, row by row, equal lengths only) and whether duplicates are computed once; and a duplicate counts
    exactly as a second copy: loss sums add up, token-mean gradient = (sum over rows) / tokens."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = window_rollout(model, tok, seed=3)

    def rows_with_duplicate():
        rows = rows_from(copy.deepcopy(trajs), "window")
        return rows + [window_rows([copy.deepcopy(rows[0].samples[0])])[0]]

    def update(rows, fwd, lr=0.1, clip=1.0):
        m, _ = load_policy(tiny_model_dir, "cpu")
        cfg = build_config(None, ["rl.kl_coef=0", "rl.loss_agg=token-mean", "rl.minibatches=1", "rl.ppo_epochs=1",
                                  f"rl.max_grad_norm={clip}"])
        stats = policy_update(m, torch.optim.SGD(m.parameters(), lr=lr), rows, cfg.rl, fwd, np.random.default_rng(0))
        grads = torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
        return stats, torch.cat([p.detach().flatten() for p in m.parameters()]), grads

    pad_id = tok.pad_token_id
    ways = {"padded": Forward(pad_id, 1 << 16), "row by row": Forward(pad_id, 64),
            "equal lengths": Forward(pad_id, 1 << 16, pad=False),
            "no sharing": Forward(pad_id, 1 << 16, share_prefix=False)}
    out = {way: update(rows_with_duplicate(), fwd) for way, fwd in ways.items()}
    stats, weights, _ = out["row by row"]
    assert (weights - torch.cat([p.detach().flatten() for p in model.parameters()])).abs().max() > 1e-4
    for way, (s, w, _) in out.items():
        for key in ("train/loss", "train/pg_loss", "train/ratio", "train/grad_norm"):
            assert s[key] == pytest.approx(stats[key], rel=1e-4, abs=1e-6), (way, key)
        torch.testing.assert_close(w, weights, atol=1e-6, rtol=0, msg=way)
    # the duplicate is a second copy: n3 * g([a, b.., a]) = n2 * g([a, b..]) + n1 * g([a])
    rows = rows_with_duplicate()
    tokens = [sum(len(s.response_ids) for s in decisions(part)) for part in (rows, rows[:-1], rows[-1:])]
    grads = [update(part, ways["padded"], lr=0.0, clip=1e9)[2] for part in (rows, rows[:-1], rows[-1:])]
    torch.testing.assert_close(tokens[0] * grads[0], tokens[1] * grads[1] + tokens[2] * grads[2],
                               atol=1e-5 * float(grads[0].abs().max() * tokens[0]), rtol=1e-4)
