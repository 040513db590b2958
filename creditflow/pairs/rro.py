"""Next-action exploration for process-supervised preference data (RRO paper, §3.2, Algorithm 1, §4.2).

Pure logic over two callables, so tests drive it with scripted oracles:

* ``propose(n) -> list[C]``: ``n`` fresh candidates a_t ~ π(·|e_1:t−1) (Alg. 1 line 16);
* ``estimate(cands) -> list[float]``: their process rewards r_PRM(e_1:t−1 ⊕ a_t) (Alg. 1 line 18).

:func:`rising_sampler` is the reward-rising rule: sample *one* candidate at a time and stop at the first
with r_t ≥ r_{t−1} (Alg. 1 lines 15-20, §3.2 "greater than or equal to the preceding action's reward")
or after ``max_candidates`` (N_max = 5, §4.3). It never proposes or estimates a candidate the sequential
rule would not have, so its counts are exactly the paper's "# samples". :func:`fixed_size_sampler` is the
fixed-size exploration baseline (§4.2): always N candidates (proposed and estimated as one batch: same
count as one at a time).

Both pick chosen = argmax reward, rejected = argmin reward over the candidates (Alg. 1 lines 21-22;
ties go to the earliest sampled), and the trajectory continues with the chosen action. A step yields a
preference pair only when

* (rising) a rising candidate was found: otherwise "that step is omitted in the agent optimization
  phase" (§4.3), and
* chosen and rejected differ in reward. With one candidate (the first one already rises) chosen and
  rejected are the same action: DPO's gradient on such a pair is exactly zero, so it is left out of the
  data; the step still counts in samples/step. Equal rewards (possible in the fixed-size baseline)
  likewise carry no preference.

Rewards are compared after rounding to 9 decimals (:func:`_q`): a process reward is a mean of m final
scores, and two equal means summed in different orders can differ in the last bits (0.72 vs
0.7200000000000001 on WebShop's graded scores), which would otherwise make a tie a "preference" or a
step that exactly matches r_{t−1} "not rising".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Sequence, TypeVar

C = TypeVar("C")

NO_RISING = "no rising candidate"
NO_CONTRAST = "chosen and rejected have equal reward"


@dataclass
class StepSampling(Generic[C]):
    """The exploration of one step: candidates in sampling order and what was made of them."""

    candidates: list[C]
    rewards: list[float]
    chosen: int  # index of the highest-reward candidate; the trajectory continues with it
    rejected: int  # index of the lowest-reward candidate
    rising: bool | None = None  # rising sampler: whether a candidate reached r_{t-1}; fixed: None
    previous_reward: float | None = None  # r_{t-1} (rising sampler)
    omitted: str = ""  # why the step gives no preference pair ("" = it gives one)
    meta: dict = field(default_factory=dict)

    @property
    def samples(self) -> int:
        """Candidates sampled at this step (the paper's "# samples" counts these)."""
        return len(self.candidates)

    @property
    def keep(self) -> bool:
        return not self.omitted

    @property
    def chosen_candidate(self) -> C:
        return self.candidates[self.chosen]

    @property
    def rejected_candidate(self) -> C:
        return self.candidates[self.rejected]


def _q(reward: float) -> float:
    """A reward as compared: rounded to 9 decimals, so float noise in a mean never decides."""
    return round(float(reward), 9)


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (_q(values[i]), -i))


def _argmin(values: Sequence[float]) -> int:
    return min(range(len(values)), key=lambda i: (_q(values[i]), i))


def _finish(cands: list, rewards: list[float], **kw) -> StepSampling:
    hi, lo = _argmax(rewards), _argmin(rewards)
    out = StepSampling(cands, rewards, hi, lo, **kw)
    if not out.omitted and not _q(rewards[hi]) > _q(rewards[lo]):
        out.omitted = NO_CONTRAST
    return out


def rising_sampler(propose: Callable[[int], list[C]], estimate: Callable[[list[C]], list[float]],
                   previous_reward: float, max_candidates: int = 5) -> StepSampling[C]:
    """Reward-rising sampling of one step (Alg. 1 lines 14-22)."""
    if max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    cands: list[C] = []
    rewards: list[float] = []
    rising = False
    while len(cands) < max_candidates:  # repeat ... (line 15), capped at N_max (§4.3)
        (cand,) = propose(1)  # line 16: â_t ~ π(·|e_1:t−1)
        (reward,) = estimate([cand])  # line 18: r_PRM,t = ProcessReward(e_1:t−1 ⊕ â_t)
        cands.append(cand)  # line 19
        rewards.append(float(reward))
        if _q(reward) >= _q(previous_reward):  # line 20: until r_PRM,t ≥ r_PRM,t−1
            rising = True
            break
    return _finish(cands, rewards, rising=rising, previous_reward=float(previous_reward),
                   omitted="" if rising else NO_RISING)  # §4.3: no rising reward -> step omitted


def fixed_size_sampler(propose: Callable[[int], list[C]], estimate: Callable[[list[C]], list[float]],
                       num_candidates: int = 5) -> StepSampling[C]:
    """Fixed-size exploration (§4.2): N candidates, best vs. worst."""
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be >= 1, got {num_candidates}")
    cands = list(propose(num_candidates))
    if len(cands) != num_candidates:
        raise ValueError(f"propose({num_candidates}) returned {len(cands)} candidates")
    rewards = [float(r) for r in estimate(cands)]
    return _finish(cands, rewards)


def sample_step(exploration: str, propose, estimate, previous_reward: float, candidates: int) -> StepSampling:
    """Dispatch on the exploration name (``rising`` | ``fixed``)."""
    if exploration == "rising":
        return rising_sampler(propose, estimate, previous_reward, candidates)
    if exploration == "fixed":
        return fixed_size_sampler(propose, estimate, candidates)
    raise ValueError(f"unknown exploration {exploration!r}; use rising or fixed")
