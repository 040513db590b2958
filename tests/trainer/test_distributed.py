"""Data parallelism: the helpers of creditflow.trainer.distributed, and the policy update of 2 gloo processes
against one process on the same rows (the equivalence docs/scaling.md states).

The update is compared through its gradient (summed over the processes) and through the weights after
SGD steps, which move each weight by lr x gradient. AdamW's first steps move a weight by about lr x g / |g|,
so a weight whose gradient is at float-noise level (|g| ~ its eps) can differ by a sizeable share of lr
between any two summation orders, one process or two; that is Adam, not data parallelism.
"""

import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from creditflow.config import build_config
from creditflow.policy.load import load_policy
from creditflow.rollout.trajectory import StartState, Step, Trajectory
from creditflow.rollout.engine import RolloutResult
from creditflow.trainer.distributed import (MAX, MEAN, POOLED_MEAN, POOLED_STD, SUM, Local, World, all_max,
                                          all_reduce_grads, all_sum, combine, gather, gather_rollout,
                                          gather_trajectories, reduce_metrics, shard, without_tokens)
from creditflow.trainer.forward import Forward
from creditflow.trainer.rl import policy_update
from creditflow.trainer.sequences import Row, Sample, window_rows

# one update per case (rank 1's groups have zero advantages in the "idle" case)
CASES = {
    "token-mean + KL, 2 PPO epochs": ["rl.loss_agg=token-mean", "rl.kl_coef=0.05", "rl.ppo_epochs=2"],
    "seq-mean, rank 1 idle (no KL: zero-advantage rows are skipped)": ["rl.loss_agg=seq-mean-token-mean",
                                                                       "rl.kl_coef=0"],
    "traj-mean, entropy, small micro-batches": ["rl.loss_agg=traj-mean", "rl.entropy_coef=0.01", "rl.token_budget=64"],
}
GROUPS = 4  # two per process


def test_shard_gives_contiguous_shares_that_concatenate_back():
    items = list(range(7))
    shares = [shard(items, World(r, 3)) for r in range(3)]
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    assert shard(items, World()) == items
    assert [shard(list(range(4)), World(r, 2)) for r in range(2)] == [[0, 1], [2, 3]]


def test_one_process_world_touches_nothing():
    world = World()
    values = [3, 2.5]
    assert all_sum(values, world) is values and all_max(4, world) == 4 and gather("x", world) == ["x"]
    trajs = [Trajectory("t")]
    assert gather_trajectories(trajs, world) is trajs  # nothing copied
    result = RolloutResult(trajs, ["g"])
    assert gather_rollout(result, world) is result
    p = torch.nn.Parameter(torch.ones(2))
    all_reduce_grads([p], world)
    assert p.grad is None


def test_reduce_metrics_sums_counts_takes_slowest_time_and_weighs_rates():
    """Each metric by the rule declared with it: counts add up, the slowest time wins, rates are weighted by
    what they are over, pooled samples give exact statistics."""
    def part(groups, frac, step_s, weight, samples, **more):
        return {"credit/groups": Local(groups, SUM), "credit/pruned_frac": Local(frac, MEAN, weight),
                "time/step_s": Local(step_s, MAX), "adv_mean": Local(samples, POOLED_MEAN),
                "adv_std": Local(samples, POOLED_STD), **more}

    parts = [part(2, 0.5, 1.0, 1, [1.0, 2.0], **{"only/here": Local(1.0, MEAN, 1)}), part(3, 0.0, 3.0, 3, [6.0])]
    out = combine(parts)
    assert out == {"credit/groups": 5, "credit/pruned_frac": pytest.approx(0.125), "time/step_s": 3.0,
                   "adv_mean": 3.0, "adv_std": pytest.approx(float(np.std([1.0, 2.0, 6.0]))), "only/here": 1.0}
    single = {"a": Local(0.1 + 0.2, MEAN, 3), "n": Local(4, SUM), "x": Local([0.1, 0.7], POOLED_MEAN),
              "none": Local([], POOLED_STD)}
    assert reduce_metrics(single, World()) == {"a": 0.1 + 0.2, "n": 4, "x": float(np.mean([0.1, 0.7])),
                                               "none": 0.0}  # one process: its metrics exactly


def test_without_tokens_keeps_what_curriculum_and_metrics_read():
    step = Step("s0", "obs", "up", response="r", prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1],
                next_state="s1")
    traj = Trajectory("t", [step], success=True, meta={"seed": 3}, start=StartState(3, snapshot=object()),
                      end_snapshot=object())
    light = without_tokens(traj)
    assert light.steps[0].prompt_ids is None and light.steps[0].response_ids is None
    assert light.steps[0].env_action == "up" and light.steps[0].next_state == "s1"
    assert light.start.seed == 3 and light.start.snapshot is None and light.end_snapshot is None
    assert traj.steps[0].prompt_ids == [1, 2]  # the original is untouched


def _groups(tok, rng) -> list[list[Row]]:
    """GROUPS groups of 3 trajectories with 1-3 decisions each: random prompts and responses from the
    tokenizer's vocabulary, behaviour/reference log-probs near the model's, random advantages (window rows)."""
    vocab = len(tok)
    groups = []
    for _ in range(GROUPS):
        samples = []
        for _traj in range(3):
            steps = int(rng.integers(1, 4))
            adv = float(rng.normal())
            for _ in range(steps):
                n_resp = int(rng.integers(2, 6))
                old = list(rng.normal(-6.0, 0.3, n_resp))
                samples.append(Sample(list(rng.integers(5, vocab, int(rng.integers(4, 20)))),
                                      list(rng.integers(5, vocab, n_resp)), old, adv,
                                      ref_logprobs=[x - 0.1 for x in old], traj_weight=1.0 / steps))
        groups.append(window_rows(samples))
    return groups


def _idle(groups: list[list[Row]], case: str) -> list[list[Row]]:
    """In the "rank 1 idle" case rank 1's groups (the last half) have zero advantages: no work there."""
    if "idle" not in case:
        return groups
    for rows in groups[GROUPS // 2:]:
        for row in rows:
            for s in row.samples:
                s.advantage = 0.0
    return groups


def _update(model_dir, rows, overrides, world=World()):
    """Weights, the last step's gradients and the stats after ``policy_update`` with SGD (lr 0.1)."""
    model, tok = load_policy(model_dir, "cpu", "float32")
    cfg = build_config(None, overrides)
    stats = policy_update(model, torch.optim.SGD(model.parameters(), lr=0.1), rows, cfg.rl,
                          Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tok.pad_token_id),
                          np.random.default_rng(0), world)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return weights, grads, stats


def _worker(rank: int, size: int, port: int, model_dir, out_dir) -> None:
    """One of the processes: its contiguous share of the groups, the real update with gloo."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    try:
        world = World(rank, size)
        tok = load_policy(model_dir, "cpu", "float32")[1]
        results = {}
        for case, overrides in CASES.items():
            groups = _idle(_groups(tok, np.random.default_rng(7)), case)
            mine = [row for rows in shard(groups, world) for row in rows]
            results[case] = _update(model_dir, mine, overrides, world)
        results["minibatches"] = _update(model_dir, [row for rows in shard(_groups(tok, np.random.default_rng(7)),
                                                                            world) for row in rows][: 1 + rank],
                                         ["rl.minibatches=3"], world)
        results["metrics"] = reduce_metrics({"n": Local(rank + 1, SUM), "t": Local(float(rank), MAX),
                                             "rate": Local(0.5 * rank, MEAN, weight=rank + 1),
                                             "pooled": Local([rank] * (rank + 1), POOLED_MEAN)}, world)
        mine = RolloutResult([Trajectory(f"t{rank}", group_id=f"g{rank}")], [f"u{rank}"])
        everyone = gather_rollout(mine, world)
        results["rollout"] = ([t.group_id for t in everyone.trajectories], everyone.unrestored)
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_take_the_one_process_step(tiny_model_dir, tmp_path):
    """Rows split by group over 2 gloo processes (unequal row counts, different micro-batching, an idle
    process) give the weights one process gets on all rows, within float summation noise; both processes
    hold the same weights bit for bit."""
    mp.spawn(_worker, args=(2, _free_port(), str(tiny_model_dir), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    tok = load_policy(tiny_model_dir, "cpu", "float32")[1]
    before = _update(tiny_model_dir, [], [])[0]  # no rows: no step, the starting weights
    for case, overrides in CASES.items():
        groups = _idle(_groups(tok, np.random.default_rng(7)), case)
        want, want_grads, want_stats = _update(tiny_model_dir, [row for rows in groups for row in rows], overrides)
        (got, got_grads, got_stats), (other, other_grads, _) = ranks[0][case], ranks[1][case]
        assert max((got[k] - before[k]).abs().max() for k in got) > 1e-3, case  # a real step was taken
        assert got_grads.keys() == want_grads.keys() == other_grads.keys()
        for k in want:
            assert torch.equal(got[k], other[k]), (case, k)
            torch.testing.assert_close(got[k], want[k], atol=1e-6, rtol=0, msg=f"{case}: {k}")
        for k in want_grads:
            assert torch.equal(got_grads[k], other_grads[k]), (case, k)
            torch.testing.assert_close(got_grads[k], want_grads[k], atol=1e-6, rtol=0, msg=f"{case}: grad {k}")
        for key in ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/grad_norm", "train/ratio"):
            assert got_stats[key] == pytest.approx(want_stats[key], rel=1e-5, abs=1e-7), (case, key)
    for rank in ranks:  # every process gets the run's metrics, each by its rule, and everyone's rollout
        assert rank["metrics"] == {"n": 3, "t": 1.0, "rate": pytest.approx(1 / 3), "pooled": pytest.approx(2 / 3)}
        assert rank["rollout"] == (["g0", "g1"], ["u0", "u1"])
    # rl.minibatches=3 with 1 row on rank 0 and 2 on rank 1: 2 parts each, one empty on rank 0; same steps
    (got, _, _), (other, _, _) = ranks[0]["minibatches"], ranks[1]["minibatches"]
    assert all(torch.equal(got[k], other[k]) for k in got)
    assert max((got[k] - before[k]).abs().max() for k in got) > 1e-3
