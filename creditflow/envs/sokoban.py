"""Sokoban on a text grid: own seeded generator, BFS solver, snapshot/restore.

Levels come from *reverse play* (the idea behind gym-sokoban's generator): carve a room, put every box
on a target, then let the player walk and *pull* boxes for a while. Undoing pulls with pushes solves the
level, so every level is solvable by construction; the BFS solver then returns an optimal plan, and
levels whose optimal plan does not fit in ``max_steps`` are rejected so every emitted level is winnable
within the episode. All randomness comes from ``random.Random(seed)``.

Symbols (as in verl-agent's text Sokoban): ``#`` wall, ``_`` floor, ``O`` target, ``X`` box,
``√`` box on target, ``P`` player, ``S`` player on target.

Rewards (the papers' common shaping): ``step_penalty`` (-0.1) every step, ``box_on_target`` (+1) for
pushing a box onto a target, ``box_off_target`` (-1) for pushing one off, ``solve_bonus`` (+10) when all
boxes sit on targets.

Limits (checked when the env is made, one-line :class:`EnvError`): rooms of ``MIN_SIZE..MAX_SIZE`` cells a
side, ``1..MAX_BOXES`` boxes, ``max_steps`` of ``1..MAX_STEPS``, ``min_plan`` of ``1..max_steps``, finite
rewards. Within them a reset takes well under a second (a 24x24 room with 3 boxes: ~0.02 s on average);
beyond them level generation and the BFS solver grow without bound (100x100: ~6 s a reset, 12x12 with 5
boxes: ~2 s).
"""

from __future__ import annotations

import math
import random
from collections import deque

from creditflow.envs.base import BaseTextEnv, EnvError

ACTIONS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ACTION_NAMES = list(ACTIONS)

MIN_SIZE, MAX_SIZE = 3, 24  # room height / width, walls included
MAX_BOXES = 3
MAX_STEPS = 200  # also the BFS solver's depth limit

Pos = tuple[int, int]


class Level:
    """Static part of a level (walls, targets) plus the start state."""

    def __init__(self, height: int, width: int, walls: frozenset[Pos], targets: frozenset[Pos],
                 boxes: frozenset[Pos], player: Pos):
        self.height, self.width = height, width
        self.walls, self.targets = walls, targets
        self.boxes, self.player = boxes, player
        # the static grid (walls, targets, floor); render() overlays the boxes and the player on a copy
        self._base = [["#" if (r, c) in walls else "O" if (r, c) in targets else "_" for c in range(width)]
                      for r in range(height)]

    def render(self, boxes: frozenset[Pos], player: Pos) -> str:
        """The grid: # wall, _ floor, O target, X box, √ box on target, P player, S player on target."""
        base = getattr(self, "_base", None)
        if base is None:  # a Level pickled before the static grid was kept
            base = self._base = [["#" if (r, c) in self.walls else "O" if (r, c) in self.targets else "_"
                                  for c in range(self.width)] for r in range(self.height)]
        grid = [row[:] for row in base]
        for r, c in boxes:
            grid[r][c] = "√" if (r, c) in self.targets else "X"
        r, c = player
        grid[r][c] = "S" if (r, c) in self.targets else "P"
        return "\n".join(map("".join, grid))


def _move(state: tuple[Pos, frozenset[Pos]], action: str, walls: frozenset[Pos]):
    """Apply a push move; return the new (player, boxes) or None if blocked."""
    (pr, pc), boxes = state
    dr, dc = ACTIONS[action]
    nxt = (pr + dr, pc + dc)
    if nxt in walls:
        return None
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in walls or beyond in boxes:
            return None
        return nxt, (boxes - {nxt}) | {beyond}
    return nxt, boxes


def solve(level: Level, player: Pos | None = None, boxes: frozenset[Pos] | None = None,
          max_depth: int = 200, max_nodes: int = 500_000) -> list[str] | None:
    """Breadth-first search over (player, boxes); returns an optimal action list or None."""
    start = (level.player if player is None else player, level.boxes if boxes is None else boxes)
    if start[1] <= level.targets:
        return []
    parent: dict = {start: None}
    frontier = deque([(start, 0)])
    while frontier:
        state, depth = frontier.popleft()
        if depth >= max_depth:
            continue
        for action in ACTION_NAMES:
            nxt = _move(state, action, level.walls)
            if nxt is None or nxt in parent:
                continue
            parent[nxt] = (state, action)
            if nxt[1] <= level.targets:
                plan = []
                cur = nxt
                while parent[cur] is not None:
                    cur, a = parent[cur]
                    plan.append(a)
                return plan[::-1]
            if len(parent) > max_nodes:
                return None
            frontier.append((nxt, depth + 1))
    return None


def generate_level(seed: int, height: int = 6, width: int = 6, num_boxes: int = 1,
                   max_plan: int = 15, min_plan: int = 1, max_tries: int = 200) -> tuple[Level, list[str]]:
    """Generate a solvable level and its optimal plan from ``seed`` (deterministic)."""
    rng = random.Random(seed)
    interior = (height - 2) * (width - 2)
    if height < 3 or width < 3 or interior < num_boxes + 2:
        raise EnvError(f"sokoban: room {height}x{width} too small for {num_boxes} box(es)")
    for _ in range(max_tries):
        level = _try_level(rng, height, width, num_boxes)
        if level is None:
            continue
        plan = solve(level)
        if plan is not None and min_plan <= len(plan) <= max_plan:
            return level, plan
    raise EnvError(
        f"sokoban: no solvable {height}x{width} level with {num_boxes} box(es) and a plan of "
        f"{min_plan}..{max_plan} steps after {max_tries} tries (seed {seed})"
    )


def _try_level(rng: random.Random, height: int, width: int, num_boxes: int) -> Level | None:
    # 1. carve floor with a random walk inside the border
    cells = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    target_floor = max(num_boxes + 3, int(len(cells) * rng.uniform(0.6, 0.85)))
    pos = rng.choice(cells)
    floor = {pos}
    for _ in range(20 * len(cells)):
        if len(floor) >= target_floor:
            break
        dr, dc = rng.choice(list(ACTIONS.values()))
        nxt = (pos[0] + dr, pos[1] + dc)
        if 1 <= nxt[0] < height - 1 and 1 <= nxt[1] < width - 1:
            pos = nxt
            floor.add(pos)
    walls = frozenset((r, c) for r in range(height) for c in range(width)) - frozenset(floor)
    free = sorted(floor)
    if len(free) < num_boxes + 2:
        return None
    picks = rng.sample(free, num_boxes + 1)
    targets = frozenset(picks[:num_boxes])
    boxes = set(targets)
    player = start = picks[num_boxes]
    # 2. reverse play: walk and pull boxes; keep the state whose boxes moved farthest
    best, best_score = None, 0
    moved = 0
    for _ in range(rng.randint(40, 120) * num_boxes):
        name = rng.choice(ACTION_NAMES)
        dr, dc = ACTIONS[name]
        nxt = (player[0] + dr, player[1] + dc)
        if nxt in walls or nxt in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes and rng.random() < 0.9:  # pull the box behind us
            boxes.remove(behind)
            boxes.add(player)
            moved += 1
        player = nxt
        displacement = sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in boxes)
        away = abs(player[0] - start[0]) + abs(player[1] - start[1])
        score = displacement * (moved + 1) + away
        if any(b not in targets for b in boxes) and score > best_score:
            best, best_score = (frozenset(boxes), player), score
    if best is None:
        return None
    return Level(height, width, walls, targets, best[0], best[1])


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise EnvError(f"sokoban: {name} must be in {lo}..{hi}, got {value}")


def _offset(a: Pos, b: Pos) -> str:
    """Where ``a`` lies relative to ``b`` in words: '2 down, 1 left' / 'same place'."""
    dr, dc = a[0] - b[0], a[1] - b[1]
    parts = []
    if dr:
        parts.append(f"{abs(dr)} {'down' if dr > 0 else 'up'}")
    if dc:
        parts.append(f"{abs(dc)} {'right' if dc > 0 else 'left'}")
    return ", ".join(parts) if parts else "same place"


class SokobanEnv(BaseTextEnv):
    """Text Sokoban; ``reset(seed=z)`` builds level z (same seed, same level)."""

    name = "sokoban"
    description = "the Sokoban puzzle game"
    tokenizer_isolate_chars = "#_OX√PS"  # one token per grid cell for the tiny policy

    def __init__(self, size: int = 6, height: int | None = None, width: int | None = None,
                 num_boxes: int = 1, max_steps: int = 15, step_penalty: float = -0.1,
                 box_on_target: float = 1.0, box_off_target: float = -1.0, solve_bonus: float = 10.0,
                 min_plan: int = 1, describe_positions: bool = False):
        _check_range("max_steps", max_steps, 1, MAX_STEPS)
        super().__init__(max_steps=max_steps)
        for name, value in (("size", size), ("height", height), ("width", width)):
            if value is not None:
                _check_range(name, value, MIN_SIZE, MAX_SIZE)
        self.height = int(size if height is None else height)
        self.width = int(size if width is None else width)
        _check_range("num_boxes", num_boxes, 1, MAX_BOXES)
        if (self.height - 2) * (self.width - 2) < num_boxes + 2:
            raise EnvError(f"sokoban: room {self.height}x{self.width} too small for {num_boxes} box(es)")
        _check_range("min_plan", min_plan, 1, max_steps)
        for name, value in (("step_penalty", step_penalty), ("box_on_target", box_on_target),
                            ("box_off_target", box_off_target), ("solve_bonus", solve_bonus)):
            if not math.isfinite(value):
                raise EnvError(f"sokoban: {name} must be a finite number, got {value!r}")
        self.num_boxes = int(num_boxes)
        self.step_penalty, self.box_on_target = step_penalty, box_on_target
        self.box_off_target, self.solve_bonus = box_off_target, solve_bonus
        self.min_plan = int(min_plan)
        self.describe_positions = bool(describe_positions)
        self.level: Level | None = None
        self.player: Pos = (0, 0)
        self.boxes: frozenset[Pos] = frozenset()
        self.optimal_plan: list[str] = []

    # -- helpers --------------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return ("push every box (X) onto a target (O); you are P. Boxes can only be pushed, not pulled. "
                "Symbols: # wall, _ floor, O target, X box, √ box on target, P player, S player on target.")

    def render(self) -> str:
        assert self.level is not None, "call reset() first"
        drawn = (self.level, self.boxes, self.player)
        if getattr(self, "_drawn", None) != drawn:  # a step asks twice (observation, state_key): draw once
            self._drawn, self._grid = drawn, self.level.render(self.boxes, self.player)
        return self._grid

    def observation(self) -> str:
        """The grid, plus (``describe_positions``) where each box lies relative to the player and where
        its nearest target lies relative to it. The state key is always the bare grid."""
        grid = self.render()
        if not self.describe_positions:
            return grid
        lines = []
        for box in sorted(self.boxes):
            target = min(sorted(self.level.targets), key=lambda t: abs(t[0] - box[0]) + abs(t[1] - box[1]))
            lines.append(f"Box: {_offset(box, self.player)} of you; its target: {_offset(target, box)} of it.")
        return grid + "\n" + "\n".join(lines)

    def solved(self) -> bool:
        return self.level is not None and self.boxes <= self.level.targets

    def _info(self, valid: bool = True) -> dict:
        won = self.solved()
        return {
            "task": self.task,
            "admissible_actions": list(ACTION_NAMES),
            "action_valid": valid,
            "won": won,
            "score": 1.0 if won else 0.0,
            "state_key": self.render(),
            "boxes_on_target": len(self.boxes & self.level.targets),
        }

    def expert_actions(self) -> list[str] | None:
        """Optimal plan from the current state (BFS), or None if the state is a dead end."""
        assert self.level is not None, "call reset() first"
        return solve(self.level, self.player, self.boxes)

    # -- protocol -------------------------------------------------------------------------------
    def _reset(self, seed, options):
        seed = 0 if seed is None else int(seed)
        self.level, self.optimal_plan = generate_level(
            seed, self.height, self.width, self.num_boxes, max_plan=self.max_steps, min_plan=self.min_plan
        )
        self.player, self.boxes = self.level.player, self.level.boxes
        return self.observation(), self._info()

    def _step(self, action):
        assert self.level is not None, "call reset() first"
        key = action.strip().lower() if isinstance(action, str) else None  # not text: an invalid action
        reward = self.step_penalty
        if key not in ACTIONS:
            return self.observation(), reward, False, self._info(valid=False)
        nxt = _move((self.player, self.boxes), key, self.level.walls)
        if nxt is None:  # bumping into a wall or an immovable box: a legal move that changes nothing
            return self.observation(), reward, False, self._info(valid=True)
        before = len(self.boxes & self.level.targets)
        self.player, self.boxes = nxt
        after = len(self.boxes & self.level.targets)
        if after > before:
            reward += self.box_on_target * (after - before)
        elif after < before:
            reward += self.box_off_target * (before - after)
        won = self.solved()
        if won:
            reward += self.solve_bonus
        return self.observation(), reward, won, self._info()

    def snapshot(self) -> dict:
        return {"seed": self.seed, "player": self.player, "boxes": sorted(self.boxes),
                "steps_taken": self.steps_taken, "done": self._done}

    def restore(self, snap: dict) -> tuple[str, dict]:
        """Return to a snapshot; gives back the (observation, info) of that state."""
        if self.level is None or self.seed != snap["seed"]:
            self.reset(seed=snap["seed"])
        self.player = tuple(snap["player"])
        self.boxes = frozenset(tuple(b) for b in snap["boxes"])
        self.steps_taken = snap["steps_taken"]
        self._done = snap["done"]
        return self.observation(), self._fill(self._info())
