"""ALFWorld-like household tasks on TextWorld games generated offline (``make("household", ...)``).

Games come from the PyPI ``textworld`` package (its wheel bundles the Inform7 compiler), so nothing is
downloaded. A game is fully determined by (difficulty preset, game seed): TextWorld builds a map of
rooms, a quest whose *last* action is a pick-and-place (``put X on S`` / ``insert X into C``, as in
ALFWorld's pick-and-place tasks) and distractor objects, then compiles it to a Z-machine file played
through Jericho. Compiled games are cached on disk under ``cache_dir`` (default
``$CREDITFLOW_CACHE/textworld`` or ``~/.cache/creditflow/textworld``) in a folder named by the content
hash of (preset parameters, game seed, TextWorld version, generator version); ``meta.json`` there holds
the sha256 of the game files and is checked on every load (a mismatch regenerates the game).

Splits: ``split="train"`` plays game seeds ``0 .. num_games-1``, ``split="test"`` the held-out seeds
``TEST_SEED_OFFSET + 0 ..``; ``reset(seed=z)`` plays game ``z % num_games`` of the split.

Per step: the observation is the game's cleaned feedback; ``info['task']`` is the objective ("Your task
is to: put the tv in the portmanteau."); ``admissible_actions`` are TextWorld's admissible commands;
``won`` when the quest is done (reward 1, episode ends). ``state_key`` = location + inventory + the
dynamic world facts (object places, open/closed/locked), read from TextWorld's state tracker, so no
extra game step (``look``/``inventory``) is spent. Invalid actions (RewardFlow App. B.2): a command that
is not admissible is not sent to the game (observation "Nothing happens.", as ALFWorld); an admissible
command that the game answers with "Nothing happens"-type feedback while the state stays the same is
marked ``action_valid=False`` too; with ``admissible_only=False`` other commands go to the game and are
valid only if they change the state. An action that is not text, or text the game cannot receive (a lone
surrogate), is invalid and never sent. ``expert_actions()`` returns TextWorld's
winning policy from the current state.

Transition memo (``memo=True``, the default): a game's next state is a function of its state
(location, inventory and dynamic facts, which ``state_key`` reads) and the command. Each (game, state,
command) is played in TextWorld once per process; later visits read the table (:class:`_Memo`), and
``snapshot``/``restore`` hand over a reference to a memo frame instead of copying the game. TextWorld runs
again only for a transition the table has not seen, on one of up to 8 running games per game key: the one
already at the state, else the one furthest along the frame's first-seen command path, stepped through the rest
of it, else one reset and stepped through the whole path (a replay, checked against the frame's ``state_key``).
A group of rollouts in lockstep thus keeps a running game on each rollout's own path. The memo keeps a state's
first-seen feedback text and winning plan, which TextWorld derives from the path too (docs/environments.md:
what the memo keeps from the first visit); transitions do not depend on the path. This is what makes the
credit audit's Monte-Carlo continuations affordable here (docs/audit.md); ``memo=False`` plays every step in
TextWorld, and ``snapshot``/``restore`` use the game's ``copy()`` (tests/envs/test_household.py checks that
both modes give the same observations and infos).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

from creditflow.envs.base import BaseTextEnv, EnvError

GENERATOR_VERSION = "1"
TEST_SEED_OFFSET = 1_000_000
INSTALL_HINT = "install it with `pip install creditflow[household]` (or `pip install textworld`)"


@dataclass(frozen=True)
class HouseholdPreset:
    """World size, object count and quest length of a difficulty level."""

    nb_rooms: int
    nb_objects: int
    quest_length: int
    max_steps: int


PRESETS: dict[str, HouseholdPreset] = {
    "easy": HouseholdPreset(nb_rooms=1, nb_objects=4, quest_length=2, max_steps=15),
    "medium": HouseholdPreset(nb_rooms=2, nb_objects=6, quest_length=3, max_steps=25),
    "hard": HouseholdPreset(nb_rooms=4, nb_objects=10, quest_length=5, max_steps=40),
    "expert": HouseholdPreset(nb_rooms=6, nb_objects=15, quest_length=8, max_steps=50),
}

# predicates that never change during a game (map layout, key/lock pairs) or are derived from others
_STATIC_PREDICATES = frozenset({"north_of", "south_of", "east_of", "west_of", "link", "match", "free", "edible"})
# feedback of commands that did nothing (TextWorld/Inform7 and ALFWorld wording)
_NOOP_FEEDBACK = re.compile(
    r"nothing happens|you can't|you can ?not|that's not|it isn't|isn't something you can|you don't|you aren't|"
    r"i didn't understand|not a verb i recogni|you need to|you'll have to|you lack|already|is closed|is locked|"
    r"isn't open|plainly inedible|fixed in place|there is no|there's nothing|you see nothing|jump on the spot",
    re.IGNORECASE,
)
# interpreter meta commands that would break state tracking (never sent to the game)
_META_COMMANDS = frozenset({"restart", "restore", "save", "quit", "q", "undo", "script", "unscript", "verbose",
                            "brief", "superbrief", "notify", "version", "again", "g", "oops", "score"})
NOTHING_HAPPENS = "Nothing happens."


# A TextWorld game state (``GameState``, a dict) carries the compiled ``Game`` and a ``GameProgression``;
# TextWorld's ``copy()`` deep-copies both, for every wrapper's state (about 80 ms a restore on the 2-core
# machine, 40x a step). The ``Game`` never changes during play, so a copy shares it; the progression has its
# own cheap ``copy()``. Everything else is deep-copied as TextWorld does.
_SHARED_KEYS = ("game", "_game_progression")


def copy_game_state(state):
    """A copy of a TextWorld ``GameState`` that shares the static ``Game`` (see ``_SHARED_KEYS``)."""
    if state is None:
        return None
    held = {key: state.pop(key) for key in _SHARED_KEYS if key in state}
    try:
        out = state.copy()
    finally:
        state.update(held)
    if "game" in held:
        out["game"] = held["game"]
    if "_game_progression" in held:
        prog = held["_game_progression"]
        out["_game_progression"] = prog.copy() if hasattr(prog, "copy") else prog
    return out


def _game_states(env) -> dict[tuple[int, str], dict]:
    """Every GameState along a TextWorld wrapper chain, by (depth, ``state`` or ``_prev_state``)."""
    found, depth = {}, 0
    while env is not None:
        for attr in ("state", "_prev_state"):
            value = env.__dict__.get(attr)
            if isinstance(value, dict):
                found[depth, attr] = value
        env, depth = env.__dict__.get("_wrapped_env"), depth + 1
    return found


def copy_game(env):
    """``env.copy()`` of a running TextWorld game, without deep-copying its static ``Game``: the heavy keys are
    lifted out of every state dict of the chain for the copy and put back (shared ``Game``, copied
    progression) in both the original and the copy."""
    states = _game_states(env)
    held = {}  # id(state) -> its heavy keys; wrappers share one state dict, so lift each once
    for state in states.values():
        if id(state) not in held:
            held[id(state)] = {key: state.pop(key) for key in _SHARED_KEYS if key in state}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Jericho's "not fully supported game" notice
            new = env.copy()
    finally:
        for state in states.values():
            state.update(held[id(state)])
    filled = set()
    for where, state in _game_states(new).items():
        if id(state) in filled or where not in states:
            continue
        filled.add(id(state))
        for key, value in held[id(states[where])].items():
            state[key] = value.copy() if key == "_game_progression" and hasattr(value, "copy") else value
    return new


def _require_textworld():
    try:  # optional dependency (creditflow[household])
        import textworld  # noqa: F401
        import textworld.generator  # noqa: F401
    except ImportError:
        raise EnvError(f"household: the TextWorld package is not installed; {INSTALL_HINT}") from None
    return textworld


def default_cache_dir() -> Path:
    root = os.environ.get("CREDITFLOW_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "creditflow"
    return base / "textworld"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def normalize_command(text: str) -> str:
    """Lower-case, single spaces, no trailing period: how commands are matched to admissible ones."""
    return re.sub(r"\s+", " ", (text or "").strip().lower()).rstrip(".!").strip()


def _encodable(command: str) -> bool:
    """Whether the game can receive ``command`` (UTF-8; a lone surrogate from a model's output cannot)."""
    try:
        command.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _task_from_command(command: str) -> str:
    m = re.match(r"insert (.+) into (.+)$", command)
    if m:
        return f"Your task is to: put the {m.group(1)} in the {m.group(2)}."
    m = re.match(r"put (.+) on (.+)$", command)
    if m:
        return f"Your task is to: put the {m.group(1)} on the {m.group(2)}."
    return f"Your task is to: {command}."


# ------------------------------------------------------------------------------------------------
# generation + cache
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GameRecord:
    """A compiled game in the cache."""

    folder: Path
    z8: Path
    task: str
    key: str


def game_key(preset: HouseholdPreset, game_seed: int) -> str:
    tw = _require_textworld()
    payload = {"preset": {k: v for k, v in asdict(preset).items() if k != "max_steps"}, "seed": int(game_seed),
               "textworld": tw.__version__, "generator": GENERATOR_VERSION}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _make_game(preset: HouseholdPreset, game_seed: int):
    """Build (not compile) the TextWorld game; retried with derived seeds if no quest fits."""
    _require_textworld()
    # optional dependency (creditflow[household]): imported only when a game is built
    from textworld import GameOptions
    from textworld.generator import make_grammar, make_quest, make_world
    from textworld.generator.chaining import QuestGenerationError
    from textworld.generator.game import Game

    last_error = None
    for attempt in range(20):
        seed = int(hashlib.sha256(f"{game_seed}:{attempt}".encode()).hexdigest()[:8], 16)
        options = GameOptions()
        options.seeds = seed
        options.nb_rooms = preset.nb_rooms
        options.nb_objects = preset.nb_objects
        options.quest_length = preset.quest_length
        options.grammar.only_last_action = True
        rngs = options.rngs
        try:
            world = make_world(preset.nb_rooms, nb_objects=0, rngs=rngs)
            chaining = options.chaining
            chaining.rules_per_depth = [options.kb.rules.get_matching("put", "insert")]  # pick-and-place goal
            chaining.backward = True
            chaining.create_variables = True
            chaining.rng = rngs["quest"]
            chaining.restricted_types = {"r", "d"}
            quests = make_quest(world, options)
        except (QuestGenerationError, ValueError, IndexError) as exc:
            last_error = exc
            continue
        if not quests or len(quests[-1].win_events[0].actions) < min(2, preset.quest_length):
            last_error = "quest too short"
            continue
        present = sum(1 for e in world.entities if e.type not in {"r", "d", "I", "P"})
        if preset.nb_objects > present:
            world.populate(preset.nb_objects - present, rng=rngs["objects"])
        grammar = make_grammar(options.grammar, rng=rngs["grammar"])
        game = Game(world, grammar, quests)
        game.metadata["uuid"] = f"creditflow-household-{game_seed}"
        return game, options
    raise EnvError(f"household: could not generate a game for seed {game_seed} with {preset} ({last_error})")


def ensure_game(preset: HouseholdPreset, game_seed: int, cache_dir: str | os.PathLike | None = None) -> GameRecord:
    """The compiled game for (preset, seed), generated and compiled on first use, then read from cache."""
    _require_textworld()
    # optional dependency (creditflow[household]): imported only when a game is compiled
    from textworld.generator import compile_game
    from textworld.generator.inform7 import Inform7Game

    key = game_key(preset, game_seed)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = root / key
    meta_path = folder / "meta.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            z8, js = folder / "game.z8", folder / "game.json"
            if _sha256(z8) == meta["sha256"]["game.z8"] and _sha256(js) == meta["sha256"]["game.json"]:
                return GameRecord(folder, z8, meta["task"], key)
        except (OSError, KeyError, ValueError):
            pass
        shutil.rmtree(folder, ignore_errors=True)  # corrupt or stale: rebuild
    root.mkdir(parents=True, exist_ok=True)
    game, options = _make_game(preset, game_seed)
    last_action = game.quests[-1].win_events[0].actions[-1]
    command = Inform7Game(game).gen_commands_from_actions([last_action])[0]
    task = _task_from_command(command)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        options.path = str(tmp / "game.z8")
        options.force_recompile = True
        compile_game(game, options)
        meta = {"task": task, "seed": int(game_seed), "preset": asdict(preset), "key": key,
                "sha256": {n: _sha256(tmp / n) for n in ("game.z8", "game.json")}}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished first: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
            return ensure_game(preset, game_seed, cache_dir)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, EnvError):
            raise
        raise EnvError(f"household: compiling game {game_seed} failed: {type(exc).__name__}: {exc}") from None
    return GameRecord(folder, folder / "game.z8", task, key)


# ------------------------------------------------------------------------------------------------
# env
# ------------------------------------------------------------------------------------------------

def clean_feedback(text: str) -> str:
    """Drop the interpreter's prompt/status line, the end-of-game banner and extra blank lines."""
    text = text or ""
    cut = text.rfind("\n>")
    if cut != -1 and "\n" not in text[cut + 2:].rstrip():  # the last line is the prompt + status bar
        text = text[:cut]
    drop = ("Your score has just gone up", "*** The End ***", "You scored ", "Would you like to RESTART")
    lines = [ln.rstrip() for ln in text.splitlines() if not any(d in ln for d in drop)]
    out = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return out


def is_noop_feedback(feedback: str) -> bool:
    """True for "Nothing happens"-type answers (judged on the first sentence only)."""
    first = re.split(r"[.!?\n]", (feedback or "").strip(), maxsplit=1)[0]
    return not first or bool(_NOOP_FEEDBACK.search(first))



@dataclass(frozen=True, eq=False)
class _Frame:
    """One state of one game, as the env reads it: TextWorld's GameState reduced to the keys the env uses
    (``_facts``, ``won``, ``lost``, ``admissible_commands``, ``policy_commands``), its ``state_key``, and the
    commands from reset that first reached it."""

    state: dict
    key: str
    path: tuple[str, ...]


_MEMO_KEYS = ("_facts", "won", "lost", "admissible_commands", "policy_commands")


class _Memo:
    """Per process: every game's start (frame, observation, object infos) and its transitions
    ``(game key, state_key, command) -> (next frame, feedback)``. Cleared whole past ``limit`` frames (a frame is
    a few KB; frames in use stay valid, since each carries its path)."""

    def __init__(self, limit: int = 200_000, players: int = 8, lanes: int = 8):
        self.limit, self.players, self.lanes = limit, players, lanes
        self.starts: dict[str, tuple[_Frame, str, object]] = {}
        self.frames: dict[tuple[str, str], _Frame] = {}
        self.edges: dict[tuple[str, str, str], tuple[_Frame, str]] = {}
        # TextWorld's running games of the ``players`` most recent game keys, shared by every env of the process:
        # per game up to ``lanes`` players [env, frame it is at], least recently used first. A miss plays on the
        # player furthest along the frame's path, so rollouts that run side by side (a group in lockstep) each
        # keep a player on their own path and replay nothing
        self.playing: OrderedDict[str, list[list]] = OrderedDict()

    def lanes_of(self, game_key: str, load) -> list[list]:
        """The game's running players ``[env, frame it is at]`` (``load()`` starts the first)."""
        found = self.playing.pop(game_key, None)
        if found is None:
            found = [[load(), None]]
        self.playing[game_key] = found
        while len(self.playing) > self.players:
            _, old = self.playing.popitem(last=False)
            for env, _ in old:
                env.close()
        return found

    def player(self, game_key: str, load) -> list:
        """One of the game's players (the least recently used)."""
        return self.lanes_of(game_key, load)[0]

    def frame(self, game_key: str, state: dict, key: str, path: tuple[str, ...]) -> _Frame:
        found = self.frames.get((game_key, key))
        if found is None:
            if len(self.frames) >= self.limit:
                self.starts.clear(), self.frames.clear(), self.edges.clear()
            slim = {k: (list(state[k]) if isinstance(state.get(k), (list, tuple)) else state.get(k))
                    for k in _MEMO_KEYS}
            found = self.frames[game_key, key] = _Frame(slim, key, path)
        return found


_MEMO = _Memo()


class HouseholdEnv(BaseTextEnv):
    """ALFWorld-like pick-and-place quests in TextWorld games generated from a seed."""

    name = "household"

    def __init__(self, difficulty: str = "easy", split: str = "train", num_games: int = 100,
                 max_steps: int | None = None, cache_dir: str | None = None, admissible_only: bool = True,
                 success_reward: float = 1.0, memo: bool = True):
        if difficulty not in PRESETS:
            raise EnvError(f"household: unknown difficulty {difficulty!r}; choose from {', '.join(PRESETS)}")
        if split not in ("train", "test"):
            raise EnvError(f"household: split must be 'train' or 'test', got {split!r}")
        if int(num_games) < 1:
            raise EnvError(f"household: num_games must be >= 1, got {num_games}")
        self.preset = PRESETS[difficulty]
        super().__init__(max_steps=max_steps if max_steps is not None else self.preset.max_steps)
        self._tw = _require_textworld()
        self.difficulty, self.split, self.num_games = difficulty, split, int(num_games)
        self.cache_dir = cache_dir
        self.admissible_only = bool(admissible_only)
        self.success_reward = float(success_reward)
        self.memo = bool(memo)
        self._frame: _Frame | None = None  # memo: the current state's frame
        self._envs: OrderedDict[str, object] = OrderedDict()  # loaded games, most recent last
        self.game: GameRecord | None = None
        self._env = None
        self._state = None
        self._obs = ""

    # -- games ----------------------------------------------------------------------------------
    @property
    def num_tasks(self) -> int:
        """The split's task pool: ``reset(seed=z)`` plays task ``z % num_tasks`` (evaluation splits use it)."""
        return self.num_games

    def game_seed(self, seed: int) -> int:
        index = int(seed) % self.num_games
        return index if self.split == "train" else TEST_SEED_OFFSET + index

    def prepare(self, count: int | None = None) -> list[GameRecord]:
        """Generate (or find in the cache) the first ``count`` games of the split (all by default)."""
        n = self.num_games if count is None else min(int(count), self.num_games)
        return [ensure_game(self.preset, self.game_seed(z), self.cache_dir) for z in range(n)]

    def _start_game(self, record: GameRecord | None = None):
        """A TextWorld env playing ``record`` (default: the current game)."""
        record = self.game if record is None else record
        infos = self._tw.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True,
                                  score=True, max_score=True)
        with warnings.catch_warnings():  # Jericho's "not fully supported game" notice (TextWorld games)
            warnings.simplefilter("ignore")
            env = self._tw.start(str(record.z8), infos)
        env.seed(1234)  # the interpreter's RNG: fixed, so replays are exact
        return env

    def _load(self, record: GameRecord):
        env = self._envs.pop(record.key, None)
        if env is None:
            env = self._start_game(record)
        self._envs[record.key] = env
        while len(self._envs) > 8:
            _, old = self._envs.popitem(last=False)
            old.close()
        return env

    # -- state ----------------------------------------------------------------------------------
    def _names(self, var) -> str:
        if var.name in ("P", "I"):
            return var.name
        info = self._game_infos.get(var.name)
        return info.name if info is not None and info.name else var.name

    def state_key(self, state=None) -> str:
        """Location + inventory + dynamic facts, from the state tracker (no extra game step)."""
        if state is None and self._frame is not None:
            return self._frame.key
        state = self._state if state is None else state
        loc, inv, facts = "?", [], []
        for prop in state["_facts"]:
            args = [self._names(v) for v in prop.arguments]
            if prop.name == "at" and args[0] == "P":
                loc = args[1]
            elif prop.name == "in" and len(args) == 2 and args[1] == "I":
                inv.append(args[0])
            elif prop.name not in _STATIC_PREDICATES:
                facts.append(f"{prop.name}({','.join(args)})")
        return f"at {loc} | carrying {', '.join(sorted(inv)) or 'nothing'} | {'; '.join(sorted(facts))}"

    def _info(self, valid: bool = True) -> dict:
        won = bool(self._state["won"])
        return {
            "task": self.game.task,
            "admissible_actions": list(self._state["admissible_commands"]),
            "action_valid": valid,
            "won": won,
            "score": 1.0 if won else 0.0,
            "state_key": self.state_key(),
            "game_key": self.game.key,
        }

    def expert_actions(self) -> list[str] | None:
        """TextWorld's winning policy from the current state (None if the quest can no longer be won)."""
        assert self._state is not None, "call reset() first"
        plan = self._state["policy_commands"]
        return list(plan) if plan or self._state["won"] else None

    # -- protocol -------------------------------------------------------------------------------
    def _reset(self, seed, options):
        seed = 0 if seed is None else int(seed)
        self.game = ensure_game(self.preset, self.game_seed(seed), self.cache_dir)
        self._frame = None
        start = _MEMO.starts.get(self.game.key) if self.memo else None
        if start is not None:
            self._frame, self._obs, self._game_infos = start
            self._state = self._frame.state
            return self._obs, self._info()
        self._env = self._load(self.game) if not self.memo else _MEMO.player(self.game.key, self._start_game)[0]
        self._state = self._env.reset()
        self._game_infos = self._state["game"].infos if "game" in self._state else self._env._game.infos
        feedback = self._state["feedback"] or ""
        objective = self._state.get("objective") or ""
        if objective and objective in feedback:  # drop the banner and TextWorld's own objective text
            feedback = feedback.split(objective, 1)[1]
        self._obs = f"{clean_feedback(feedback)}\n\n{self.game.task}"
        if self.memo:
            self._frame = _MEMO.frame(self.game.key, self._state, self.state_key(self._state), ())
            _MEMO.starts[self.game.key] = (self._frame, self._obs, self._game_infos)
            _MEMO.player(self.game.key, self._start_game)[1] = self._frame
            self._state = self._frame.state
        return self._obs, self._info()

    def _sync(self) -> list:
        """Memo: a TextWorld player of this game brought to the current frame: one already there; else the one
        whose frame lies furthest along the frame's command path, stepped through the rest of it; else a new
        player (up to the memo's ``lanes``) or the least recently used one, reset and stepped through all of it."""
        lanes = _MEMO.lanes_of(self.game.key, self._start_game)
        path = self._frame.path
        player, done = None, -1
        for lane in lanes:
            at = lane[1]
            if at is self._frame:
                player, done = lane, len(path)
                break
            if at is not None and done < len(at.path) <= len(path) and path[:len(at.path)] == at.path:
                player, done = lane, len(at.path)
        if player is None:
            if len(lanes) < _MEMO.lanes:
                player = [self._start_game(), None]
                lanes.append(player)
            else:
                player = lanes[0]
        lanes[:] = [lane for lane in lanes if lane is not player] + [player]  # most recently used last
        if player[1] is not self._frame:
            player[1] = None
            state = player[0].reset() if done < 0 else None
            for command in path[max(done, 0):]:
                state, _, _ = player[0].step(command)
            if state is not None and self.state_key(state) != self._frame.key:
                raise EnvError(f"household: replaying game {self.game.key}'s path of {len(path)} "
                               "commands reached another state (TextWorld not deterministic here); use memo=False")
            player[1] = self._frame
        return player

    def _play(self, command: str) -> tuple[str, str]:
        """One transition from the current state: (new state_key, raw feedback); TextWorld runs on a memo miss
        only."""
        if not self.memo:
            self._state, _, _ = self._env.step(command)
            return self.state_key(), self._state["feedback"]
        edge = _MEMO.edges.get((self.game.key, self._frame.key, command))
        if edge is None:
            player = self._sync()
            player[1] = None  # (should the step fail)
            state, _, _ = player[0].step(command)
            frame = _MEMO.frame(self.game.key, state, self.state_key(state), self._frame.path + (command,))
            edge = _MEMO.edges[self.game.key, self._frame.key, command] = (frame, state["feedback"])
            player[1] = frame
        self._frame, feedback = edge
        self._state = self._frame.state
        return self._frame.key, feedback

    def _step(self, action):
        assert self._state is not None, "call reset() first"
        command = normalize_command(action) if isinstance(action, str) else ""  # not text: invalid
        admissible = {normalize_command(c): c for c in self._state["admissible_commands"]}
        if command in _META_COMMANDS or command.startswith("tw-") or not command or not _encodable(command) \
                or (self.admissible_only and command not in admissible):
            return NOTHING_HAPPENS, 0.0, False, self._info(valid=False)
        command = admissible.get(command, command)  # the game's own spelling
        before = self.state_key()
        after, feedback = self._play(command)
        feedback = clean_feedback(feedback)
        # RewardFlow App. B.2: an action is valid if it executed and changed the state. Admissible
        # commands that only inform (look, examine, inventory) stay valid unless the game answers
        # "Nothing happens"-type feedback; other commands (admissible_only=False) must change the state.
        unchanged = after == before
        valid = not (unchanged and (command not in admissible.values() or is_noop_feedback(feedback)))
        won = bool(self._state["won"])
        done = won or bool(self._state["lost"])
        self._obs = feedback or NOTHING_HAPPENS
        return self._obs, (self.success_reward if won else 0.0), done, self._info(valid=valid)

    def snapshot(self) -> dict:
        """A copy of the running game (TextWorld ``env.copy()``, see :func:`copy_game`) plus the episode
        counters."""
        assert self._state is not None, "call reset() first"
        if self.memo:  # a reference to the memo's frame: nothing is copied
            return {"seed": self.seed, "game": self.game, "frame": self._frame, "infos": self._game_infos,
                    "obs": self._obs, "steps_taken": self.steps_taken, "done": self._done}
        env = copy_game(self._env)
        return {"seed": self.seed, "game": self.game, "env": env, "state": copy_game_state(self._state),
                "infos": self._game_infos, "obs": self._obs, "steps_taken": self.steps_taken, "done": self._done}

    def restore(self, snap: dict) -> tuple[str, dict]:
        if ("frame" in snap) != self.memo:
            raise EnvError(f"household: a snapshot taken with memo={'frame' in snap} cannot be restored by an env "
                           f"with memo={self.memo}")
        self.seed, self.game = snap["seed"], snap["game"]
        if self.memo:
            self._frame, self._game_infos = snap["frame"], snap["infos"]
            self._state = self._frame.state
            self._obs, self.steps_taken, self._done = snap["obs"], snap["steps_taken"], snap["done"]
            return self._obs, self._fill(self._info())
        self._env = copy_game(snap["env"])  # the snapshot stays reusable
        old = self._envs.pop(self.game.key, None)
        if old is not None and old is not self._env:
            old.close()
        self._envs[self.game.key] = self._env
        self._state = copy_game_state(snap["state"])
        self._game_infos = snap["infos"]
        self._obs, self.steps_taken, self._done = snap["obs"], snap["steps_taken"], snap["done"]
        return self._obs, self._fill(self._info())

    def __getstate__(self) -> dict:
        """Picklable (for process pools) between episodes: running games are not carried; call reset()."""
        state = dict(self.__dict__)
        state.update(_envs=OrderedDict(), _env=None, _state=None, _tw=None, _frame=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._tw = _require_textworld()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
