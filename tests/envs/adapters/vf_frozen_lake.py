"""A verifiers environment for the adapter tests: verifiers' own ``GymEnv`` running gymnasium's FrozenLake
(non-slippery), loaded the way the Environments Hub loads one (``load_environment``)."""

import gymnasium
import verifiers as vf

ACTIONS = ["left", "down", "right", "up"]


def frozen_lake(**_):
    return gymnasium.make("FrozenLake-v1", is_slippery=False)


def action_index(text: str) -> int:
    return ACTIONS.index(text.strip().lower())


def load_environment(num_train_episodes: int = 8, num_eval_episodes: int = 4, max_episode_steps: int = 8):
    return vf.GymEnv(env_cls=frozen_lake, action_parser=action_index, num_train_episodes=num_train_episodes,
                     num_eval_episodes=num_eval_episodes, max_episode_steps=max_episode_steps,
                     system_prompt="Walk on FrozenLake from cell 0 to cell 15 (a 4x4 grid, row by row). "
                                   "Answer left, down, right or up.")
