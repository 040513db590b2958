"""WebShop-style shopping episodes (``creditflow.envs.make("webshop", ...)``).

``reset(seed=z)`` picks goal ``z % len(goals)`` of the split and shows the search page with the
instruction. Actions are WebShop's ``search[query]`` and ``click[button]``; the episode ends with
``click[buy now]`` (reward = WebShop's score of the purchase) or at ``max_steps`` (reward 0). Every
other step has reward 0. An action that is not text, is too long, is not ``search[...]`` /
``click[...]``, has an empty or bracket-unbalanced argument, names a button that is not on the page, or
searches away from the search page is invalid: nothing changes and the same page is shown again.

``info``: ``task`` (the instruction), ``admissible_actions`` (``click[...]`` for each button on the
page, lower-cased as in WebShop's ``get_available_actions``; ``None`` on the search page, where the
action is a free-text ``search[...]``), ``action_valid``, ``won`` (score 1), ``score`` (the purchase's
score, 0 before), ``state_key`` (page + query + results page + item + chosen options), plus
``available_actions`` (WebShop's ``{"has_search_bar", "clickables"}``), ``page``, ``goal_index`` and,
after a purchase, ``purchased_asin``, ``purchased_options`` and ``reward_info``.
"""

from __future__ import annotations

import numbers
import os
import re
from dataclasses import astuple

from creditflow.envs.base import INVALID_ACTION_PREFIX, BaseTextEnv, EnvError
from creditflow.envs.webshop import pages
from creditflow.envs.webshop.catalog import Catalog, generated_catalog
from creditflow.envs.webshop.expert import expert_plan
from creditflow.envs.webshop.reward import webshop_reward
from creditflow.envs.webshop.vocab import PRODUCT_TYPES
from creditflow.envs.webshop.webshop_data import load_webshop_catalog

MAX_ACTION_CHARS = 500
DEFAULT_PRODUCTS = 1000
MAX_PRODUCTS = 200_000
_ACTION = re.compile(r"\s*(search|click)\s*\[(.*)\]\s*", re.DOTALL | re.IGNORECASE)


def parse_action(action: object) -> tuple[str, str | None]:
    """``("search", query)``, ``("click", button)`` or ``("invalid", None)``; never raises."""
    if not isinstance(action, str) or action.startswith(INVALID_ACTION_PREFIX) or len(action) > MAX_ACTION_CHARS:
        return "invalid", None
    m = _ACTION.fullmatch(action)
    if m is None:
        return "invalid", None
    kind, arg = m.group(1).lower(), m.group(2)
    if not arg.strip() or not _balanced(arg):
        return "invalid", None
    return kind, arg


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            return False
    return depth == 0


# -- option checks: one-line errors, no silent coercion ----------------------------------------------


def _int_option(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise EnvError(f"webshop: {name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise EnvError(f"webshop: {name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _choice_option(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise EnvError(f"webshop: {name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def catalog_for(key: tuple) -> Catalog:
    """The (cached) catalog a ``Catalog.key`` names."""
    if key[0] == "generated":
        return generated_catalog(*key[1:])
    return load_webshop_catalog(*key[1:])


class WebShopEnv(BaseTextEnv):
    """Shopping on a generated catalog (default) or on WebShop's own data files (``data_dir``)."""

    name = "webshop"
    description = ("a WebShop-style online store: find and buy the product the instruction describes. "
                   "On the search page act with search[keywords]; on other pages click[button] with one of "
                   "the page's buttons (a product's ID, an option value, < prev, next >, description, "
                   "features, reviews, back to search, buy now)")
    # The tiny from-scratch policy's tokenizer (policy/factory.py, built by recipes/sft.py): product words, brands
    # and IDs need a larger vocabulary than 1024 to stay whole words, and folding case makes a result's
    # title read as the same tokens as the lower-case instruction, and its ID as the same tokens as its
    # lower-case click (measured: docs/environments.md "webshop").
    tiny_vocab_size = 4096
    tokenizer_lowercase = True
    # Catalogs up to this size give the tiny policy's tokenizer one token per product ID (tokenizer_words).
    WHOLE_ID_TOKENS_UP_TO = 20_000

    def __init__(self, split: str = "train", num_products: int | None = None, catalog_seed: int = 0,
                 data_dir: str | None = None, goals: str | None = None, max_steps: int = 15):
        self.split = _choice_option("split", split, ("train", "test"))
        max_steps = _int_option("max_steps", max_steps, 1, 1000)
        super().__init__(max_steps=max_steps)
        seed = _int_option("catalog_seed", catalog_seed, 0, 2**63 - 1)
        if num_products is not None:
            num_products = _int_option("num_products", num_products, 1 if data_dir else len(PRODUCT_TYPES),
                                       MAX_PRODUCTS)
        if data_dir is None:
            if goals is not None:
                raise EnvError("webshop: goals='human'|'synthetic' goes with data_dir (the generated catalog "
                               "has its own goals)")
            self.catalog = generated_catalog(seed, num_products or DEFAULT_PRODUCTS)
        else:
            if not isinstance(data_dir, (str, os.PathLike)):
                raise EnvError(f"webshop: data_dir must be a path, got {data_dir!r}")
            kind = _choice_option("goals", "human" if goals is None else goals, ("human", "synthetic"))
            self.catalog = load_webshop_catalog(os.fspath(data_dir), kind, num_products, seed)
        self.goals = self.catalog.goals[self.split]
        if not self.goals:
            raise EnvError(f"webshop: no goals in split {self.split!r}")
        self.goal_index = 0
        self.state = pages.PageState()
        self.score = 0.0
        self.reward_info: dict | None = None

    @property
    def tokenizer_words(self) -> list[str]:
        """Words the tiny from-scratch policy's tokenizer keeps as one token each: every product ID of a
        catalog of at most ``WHOLE_ID_TOKENS_UP_TO`` products (lower case, as the policy clicks them).

        Choosing a result means copying its 10-character ID from the page into ``click[...]``. As BPE pieces
        that is a 4-6 token copy the from-scratch model learns slowly (582 SFT steps: 25% of its second
        actions open a real product); as one token per ID it is a single lookup (with a longer SFT: 84%;
        benchmarks/results/webshop_sft.md, runs D and E4). A pre-trained model copies IDs anyway; this is
        only read when the tiny default is built."""
        products = self.catalog.products
        if len(products) > self.WHOLE_ID_TOKENS_UP_TO:
            return []
        return sorted({str(p["asin"]).lower() for p in products})

    # -- helpers --------------------------------------------------------------------------------
    @property
    def num_tasks(self) -> int:
        """The split's task pool: ``reset(seed=z)`` plays task ``z % num_tasks`` (evaluation splits use it)."""
        return len(self.goals)

    def __len__(self) -> int:
        return len(self.goals)

    @property
    def goal(self) -> dict:
        return self.goals[self.goal_index]

    @property
    def task(self) -> str:
        return self.goal["instruction_text"]

    def observation(self) -> str:
        return pages.render(self.state, self.catalog, self.task, self.score)

    def _info(self, valid: bool = True) -> dict:
        buttons = pages.clickables(self.state, self.catalog)
        on_search = self.state.page == "search"
        info = {
            "task": self.task,
            "admissible_actions": None if on_search else [f"click[{b}]" for b in buttons],
            "action_valid": valid,
            "won": self.score >= 1.0,
            "score": self.score,
            "state_key": self.state.key(self.catalog),
            "available_actions": {"has_search_bar": on_search, "clickables": buttons},
            "page": self.state.page,
            "goal_index": self.goal_index,
        }
        if self.state.page == "done":
            info["purchased_asin"] = self.catalog.products[self.state.item]["asin"]
            info["purchased_options"] = self.state.chosen()
            info["reward_info"] = dict(self.reward_info or {})
        return info

    def expert_actions(self) -> list[str]:
        """The scripted shopper's actions from the current state (see ``expert.py``)."""
        return expert_plan(self.state, self.task, self.catalog)

    def purchase_score(self) -> tuple[float, dict]:
        """WebShop's reward for buying the current item with the chosen options."""
        item = self.state.item
        return webshop_reward(self.catalog.products[item], self.goal, self.catalog.prices[item],
                              self.state.chosen(), nouns=self.catalog.nouns)

    # -- protocol -------------------------------------------------------------------------------
    def _reset(self, seed, options):
        self.goal_index = (0 if seed is None else int(seed)) % len(self.goals)
        self.state = pages.PageState()
        self.score, self.reward_info = 0.0, None
        return self.observation(), self._info()

    def _step(self, action):
        kind, arg = parse_action(action)
        new = None
        if kind == "search":
            new = pages.search(self.state, arg)
        elif kind == "click":
            new = pages.click(self.state, arg, self.catalog)
        if new is None:
            return self.observation(), 0.0, False, self._info(valid=False)
        self.state = new
        if new.page != "done":
            return self.observation(), 0.0, False, self._info()
        self.score, self.reward_info = self.purchase_score()
        return self.observation(), self.score, True, self._info()

    def snapshot(self) -> dict:
        return {"catalog": self.catalog.key, "split": self.split, "seed": self.seed, "goal_index": self.goal_index,
                "state": astuple(self.state),
                "steps_taken": self.steps_taken, "done": self._done, "score": self.score,
                "reward_info": None if self.reward_info is None else dict(self.reward_info)}

    def restore(self, snap: dict) -> tuple[str, dict]:
        """Return to a snapshot; gives back the (observation, info) of that state."""
        if tuple(snap["catalog"]) != self.catalog.key or snap["split"] != self.split:
            raise EnvError(f"webshop: snapshot of catalog {tuple(snap['catalog'])} split {snap['split']!r} cannot be "
                           f"restored into catalog {self.catalog.key} split {self.split!r}")
        self.seed, self.goal_index = snap["seed"], snap["goal_index"]
        page, query, results_page, item, options = snap["state"]
        self.state = pages.PageState(page, query, results_page, item, tuple(tuple(o) for o in options))
        self.steps_taken, self._done = snap["steps_taken"], snap["done"]
        self.score = snap["score"]
        self.reward_info = None if snap["reward_info"] is None else dict(snap["reward_info"])
        return self.observation(), self._fill(self._info())

    def __getstate__(self) -> dict:
        """Picklable without the catalog: it is rebuilt (or found in the cache) from its key."""
        state = dict(self.__dict__)
        state["catalog"] = self.catalog.key
        state.pop("goals", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.catalog = catalog_for(state["catalog"])
        self.goals = self.catalog.goals[self.split]
