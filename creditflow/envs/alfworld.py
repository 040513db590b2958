"""ALFWorld adapter (``make("alfworld", ...)``): the real ALFWorld text games behind creditflow's protocol.

Needs the ``alfworld`` package (which brings ``textworld[pddl]``) and its data: the ``json_2.1.1`` folder
that ``alfworld-download`` writes into ``$ALFWORLD_DATA`` (default ``~/.cache/alfworld``); give another
place with ``data_dir``. Nothing is downloaded here: without the package or the data, ``make`` raises a
one-line :class:`~creditflow.envs.EnvError` saying how to provide them.

Splits: ``train`` = ``json_2.1.1/train``, ``test`` = ``valid_unseen`` (ALFWorld's out-of-distribution
evaluation set); ``valid_seen`` may be named directly. Games are sorted by path, ``reset(seed=z)`` plays
game ``z % n``. ``task_types`` (ALFWorld's numbers 1-6 or names) filters the games, as ALFWorld's config.

Same interface as ``household``: the observation is the game's feedback, ``info['task']`` the "Your task
is to: ..." line, ``admissible_actions`` ALFWorld's admissible commands, ``won`` from the PDDL goal check.
A command that is not admissible is not sent ("Nothing happens.", ``action_valid=False``), and an
admissible one answered by "Nothing happens." that leaves the state unchanged is invalid too (RewardFlow
App. B.2). ``state_key`` = location + inventory + a digest of all PDDL facts, which already carries the
object properties (clean/hot/cool/sliced) that RewardFlow App. B.1 appends to ALFWorld's raw text.
``expert_actions()`` asks the PDDL planner for a plan from the current state (``textworld[pddl]``).
There is no snapshot (TextWorld's PDDL backend has no ``copy``); restore by verified replay.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from creditflow.envs.base import BaseTextEnv, EnvError
from creditflow.envs.household import NOTHING_HAPPENS, is_noop_feedback, normalize_command

TASK_TYPES = {1: "pick_and_place_simple", 2: "look_at_obj_in_light", 3: "pick_clean_then_place_in_recep",
              4: "pick_heat_then_place_in_recep", 5: "pick_cool_then_place_in_recep", 6: "pick_two_obj_and_place"}
SPLITS = {"train": "train", "test": "valid_unseen", "valid_unseen": "valid_unseen", "valid_seen": "valid_seen"}
HOW_TO = ("`pip install alfworld`, run `alfworld-download` once where the internet is reachable, and point "
          "ALFWORLD_DATA (or data_dir=...) at that folder")


def _modules():
    try:  # optional dependency (creditflow[alfworld]): imported only when the env is made
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as exc:
        raise EnvError(f"alfworld: the alfworld package is not usable ({exc}); {HOW_TO}") from None
    try:
        from textworld.envs.pddl import pddl
    except ImportError:
        pddl = None
    if pddl is None or getattr(pddl, "fast_downward_missing", False):
        raise EnvError("alfworld: TextWorld's PDDL backend is missing its planner; "
                       "`pip install 'textworld[pddl]'` (the fast-downward-textworld package)")
    return textworld, AlfredDemangler, AlfredInfos


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    if data_dir:
        return Path(data_dir).expanduser()
    return Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld").expanduser()


def find_games(root: Path, split: str, task_types=None) -> list[Path]:
    """ALFWorld game files of a split, sorted; skips the kinds ALFWorld skips (movable, sliced)."""
    folder = root / "json_2.1.1" / SPLITS[split]
    games = [p for p in folder.rglob("game.tw-pddl") if "movable" not in str(p) and "Sliced" not in str(p)]
    if task_types:
        names = {TASK_TYPES.get(t, t) if isinstance(t, int) else str(t) for t in task_types}
        games = [p for p in games if any(p.parent.parent.name.startswith(n) for n in names)]
    return sorted(games)


class AlfworldEnv(BaseTextEnv):
    """ALFWorld's TextWorld games (needs the alfworld package and ALFWORLD_DATA)."""

    name = "alfworld"
    max_steps = 50

    def __init__(self, split: str = "train", data_dir: str | None = None, task_types: list | None = None,
                 max_steps: int = 50, expert: bool = True):
        super().__init__(max_steps=max_steps)
        if split not in SPLITS:
            raise EnvError(f"alfworld: split must be one of {', '.join(SPLITS)}, got {split!r}")
        self._tw, self._demangler, self._infos_wrapper = _modules()
        root = data_root(data_dir)
        self.games = find_games(root, split, task_types)
        if not self.games:
            raise EnvError(f"alfworld: no ALFWorld games under {root / 'json_2.1.1' / SPLITS[split]}; {HOW_TO}")
        self.split, self.expert = split, bool(expert)
        self._env = None
        self._loaded: Path | None = None
        self._state = None
        self.game_file: Path | None = None
        self.task = ""

    @property
    def num_tasks(self) -> int:
        """The split's task pool: ``reset(seed=z)`` plays task ``z % num_tasks`` (evaluation splits use it)."""
        return len(self.games)

    def _start(self, game: Path):
        if self._loaded != game:
            if self._env is not None:
                self._env.close()
            infos = self._tw.EnvInfos(won=True, admissible_commands=True, facts=True,
                                      policy_commands=self.expert, extras=["gamefile"])
            self._env = self._tw.start(str(game), infos,
                                       wrappers=[self._demangler(shuffle=False), self._infos_wrapper])
            self._loaded = game
        return self._env

    def state_key(self) -> str:
        facts = sorted(str(f) for f in self._state.get("facts") or self._state.get("_facts") or [])
        loc = next((f for f in facts if f.startswith("atLocation(")), "?")
        held = [f for f in facts if f.startswith("holds(")]
        digest = hashlib.sha1("\n".join(facts).encode()).hexdigest()[:12]
        return f"{loc} | {' '.join(held) or 'holds nothing'} | facts:{digest}"

    def _info(self, valid: bool = True) -> dict:
        won = bool(self._state["won"])
        return {"task": self.task, "admissible_actions": list(self._state["admissible_commands"]),
                "action_valid": valid, "won": won, "score": 1.0 if won else 0.0, "state_key": self.state_key(),
                "gamefile": str(self.game_file)}

    def expert_actions(self) -> list[str] | None:
        if not self.expert:
            return None
        plan = self._state.get("policy_commands")
        return list(plan) if plan is not None else None

    def _reset(self, seed, options):
        seed = 0 if seed is None else int(seed)
        self.game_file = self.games[seed % len(self.games)]
        self._state = self._start(self.game_file).reset()
        feedback = self._state["feedback"] or ""
        m = re.search(r"Your task is to:[^\n]*", feedback)
        self.task = m.group(0).strip() if m else ""
        return feedback.strip(), self._info()

    def _step(self, action):
        command = normalize_command(action)
        admissible = {normalize_command(c): c for c in self._state["admissible_commands"]}
        if command not in admissible:
            return NOTHING_HAPPENS, 0.0, False, self._info(valid=False)
        before = self.state_key()
        self._state, _, _ = self._env.step(admissible[command])
        feedback = (self._state["feedback"] or "").strip()
        valid = not (self.state_key() == before and is_noop_feedback(feedback))
        won = bool(self._state["won"])
        return feedback, (1.0 if won else 0.0), won, self._info(valid=valid)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            self._loaded = None
