"""Small builders for hand-made trajectories used by the credit tests."""

from __future__ import annotations

from creditflow.rollout.trajectory import Step, Trajectory


def traj(states, actions=None, *, success=False, valid=None, rewards=None, group="g", observations=None,
         score=None, next_states=True, final=True, traj_id="") -> Trajectory:
    """``states`` = s_0 .. s_T (T + 1 entries); one step per transition."""
    n = len(states) - 1
    actions = actions or [f"a{i}" for i in range(n)]
    obs = observations or list(states)
    steps = [
        Step(
            state=states[i],
            observation=obs[i],
            action=actions[i],
            valid=True if valid is None else valid[i],
            reward=0.0 if rewards is None else float(rewards[i]),
            next_state=states[i + 1] if next_states else None,
        )
        for i in range(n)
    ]
    return Trajectory(task_id=group, group_id=group, traj_id=traj_id, steps=steps,
                      final_state=states[-1] if final else "", success=success,
                      score=(1.0 if success else 0.0) if score is None else score)


def field(trajs, name):
    return [[getattr(s, name) for s in t.steps] for t in trajs]
