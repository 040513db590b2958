"""Load the original WebShop data files into a :class:`~creditflow.envs.webshop.catalog.Catalog`.

Files looked for in ``data_dir`` (the names WebShop's ``web_agent_site/utils.py`` uses):

* products: ``items_shuffle.json`` (or ``items_shuffle_1000.json``), a list of scraped products;
* attributes: ``items_ins_v2.json`` (or ``items_ins_v2_1000.json``), ``{asin: {attributes, instruction,
  instruction_attributes}}``;
* human instructions (``goals="human"``): ``items_human_ins.json``, ``{asin: [{instruction,
  instruction_attributes, instruction_options}]}``;
* optional ``reviews.json``, ``[{asin, reviews, average_rating}]``.

Per product we read ``asin``, ``name``, ``category``, ``query``, ``product_category``,
``full_description``, ``small_description``, ``pricing`` and ``customization_options`` and turn them into
the fields ``engine.py::load_products`` makes (``Title``, ``Description``, ``BulletPoints``, ``Price``,
``options``, ``Attributes``, ...), with its rules: asins that are ``nan`` or longer than 10 characters and
repeated asins are skipped, option names and values are lower-cased and ``/`` becomes ``" | "``, a
product without attributes gets ``["DUMMY_ATTR"]``. Goals follow ``goal.py`` (``get_human_goals`` /
``get_synthetic_goals``). WebShop draws prices of price ranges and price bounds from the unseeded global
RNG; we draw them from ``random.Random(seed)`` in the same order, so they are reproducible. Goals are
shuffled with ``random.Random(233)`` (WebShop's ``random.seed(233); random.shuffle(goals)``, the same
permutation); as in WebShop's baselines the first 500 are the test split and goals from index 1500 on
are the train split (500-1499 are their dev goals). With 1500 goals or fewer, the first fifth is test
and the rest train.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path

from creditflow.envs.base import EnvError
from creditflow.envs.webshop.catalog import Catalog, price_bound
from creditflow.envs.webshop.reward import heuristic_nouns

PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_FILE = "items_human_ins.json"
REVIEW_FILE = "reviews.json"
GOAL_SHUFFLE_SEED = 233
TEST_GOALS, TRAIN_FROM = 500, 1500


def _find(data_dir: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (data_dir / name).is_file():
            return data_dir / name
    raise EnvError(f"webshop: data_dir {str(data_dir)!r} has no {what} file ({' or '.join(names)})")


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EnvError(f"webshop: cannot read {path}: {exc}") from None


def parse_pricing(pricing: str | None, where: str) -> tuple[list[float], str]:
    """engine.py: ``"$12.99"`` -> [12.99]; ``"$10.00 - $20.00"`` -> [10.0, 20.0]; missing -> [100.0]."""
    if not pricing:
        return [100.0], "$100.0"
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(pricing).split("$")[1:]]
    except InvalidOperation:
        raise EnvError(f"webshop: {where}: cannot read the price {pricing!r}") from None
    if not values:
        raise EnvError(f"webshop: {where}: cannot read the price {pricing!r}")
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _options(customization: dict | None) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for name, contents in (customization or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    return options


def convert_product(raw: dict, attributes: dict, reviews: dict, where: str) -> dict:
    """One raw WebShop product -> the fields ``load_products`` makes."""
    try:
        asin = raw["asin"]
        small = raw["small_description"]
        pricing, price_tag = parse_pricing(raw.get("pricing"), where)
        attr_entry = attributes.get(asin) or {}
        review_entry = reviews.get(asin) or {}
        product = {
            "asin": asin, "name": raw["name"], "Title": raw["name"], "category": raw["category"],
            "query": raw["query"].lower().strip(), "product_category": raw["product_category"],
            "Description": raw["full_description"] or "",
            "BulletPoints": small if isinstance(small, list) else [small or ""],
            "pricing": pricing, "Price": price_tag, "options": _options(raw["customization_options"]),
            "Attributes": attr_entry.get("attributes") or ["DUMMY_ATTR"],
            "Reviews": [_review(r) for r in review_entry.get("reviews", [])],
            "Rating": review_entry.get("average_rating", "N.A."),
            "instruction_text": attr_entry.get("instruction"),
            "instruction_attributes": attr_entry.get("instruction_attributes"),
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise EnvError(f"webshop: {where}: missing or malformed field {exc}") from None
    return product


def _review(review: dict) -> dict:
    """engine.py renames ``stars`` to ``score`` and ``review`` to ``body``."""
    return {"title": review.get("title", ""), "score": review.get("score", review.get("stars", 0)),
            "body": review.get("body", review.get("review", ""))}


def _price(pricing: list[float], rng: random.Random) -> float:
    """engine.py ``generate_product_prices``: one price, or uniform within a range."""
    return pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])


def _goal(product: dict, instruction: str, attributes: list, goal_options, upper: float) -> dict:
    return {"asin": product["asin"], "name": product["name"], "query": product["query"],
            "category": product["category"], "product_category": product["product_category"],
            "instruction_text": instruction, "attributes": list(attributes), "goal_options": goal_options,
            "price_upper": upper}


def human_goals(products: list[dict], prices: list[float], human: dict, rng: random.Random) -> list[dict]:
    """goal.py ``get_human_goals``: one goal per human instruction that names attributes."""
    goals = []
    for product, price in zip(products, prices):
        for entry in human.get(product["asin"], []):
            if not entry.get("instruction_attributes"):
                continue
            upper, price_text = price_bound(price, rng)
            goals.append(_goal(product, entry["instruction"].strip(".") + price_text,
                               entry["instruction_attributes"], entry.get("instruction_options", []), upper))
    return goals


def synthetic_goals(products: list[dict], prices: list[float], rng: random.Random) -> list[dict]:
    """goal.py ``get_synthetic_goals``: one goal per combination of the product's option values."""
    goals = []
    for product, price in zip(products, prices):
        if product["instruction_text"] is None or not product["instruction_attributes"]:
            continue
        upper, price_text = price_bound(price, rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(_goal(product, f"{product['instruction_text']}{option_text}{price_text}",
                               product["instruction_attributes"], goal_options, upper))
    return goals


def split_goals(goals: list[dict]) -> dict[str, list[dict]]:
    order = list(range(len(goals)))
    random.Random(GOAL_SHUFFLE_SEED).shuffle(order)
    shuffled = [goals[i] for i in order]
    if len(shuffled) > TRAIN_FROM:
        return {"test": shuffled[:TEST_GOALS], "train": shuffled[TRAIN_FROM:]}
    n_test = max(1, len(shuffled) // 5)
    return {"test": shuffled[:n_test], "train": shuffled[n_test:]}


@lru_cache(maxsize=4)
def load_webshop_catalog(data_dir: str, goal_kind: str = "human", num_products: int | None = None,
                         seed: int = 0) -> Catalog:
    """Read WebShop's files from ``data_dir`` (cached in-process by these arguments)."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise EnvError(f"webshop: data_dir {data_dir!r} is not a directory")
    product_file = _find(root, PRODUCT_FILES, "products")
    attribute_file = _find(root, ATTRIBUTE_FILES, "attributes")
    raw_products = _read_json(product_file)
    attributes = _read_json(attribute_file)
    human = _read_json(_find(root, (HUMAN_FILE,), "human instructions")) if goal_kind == "human" else {}
    reviews = {}
    if (root / REVIEW_FILE).is_file():
        reviews = {r.get("asin"): r for r in _read_json(root / REVIEW_FILE) if isinstance(r, dict)}
    if not isinstance(raw_products, list) or not isinstance(attributes, dict) or not isinstance(human, dict):
        raise EnvError(f"webshop: {root}: products must be a JSON list and attributes/instructions JSON objects")
    if num_products is not None:
        raw_products = raw_products[:num_products]  # WebShop: items_shuffle is already shuffled
    products, seen = [], set()
    for i, raw in enumerate(raw_products):
        asin = raw.get("asin") if isinstance(raw, dict) else None
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(convert_product(raw, attributes, reviews, f"{product_file.name} item {i}"))
    if not products:
        raise EnvError(f"webshop: {product_file} holds no usable product")
    rng = random.Random(seed)
    prices = [_price(p["pricing"], rng) for p in products]
    try:
        goals = human_goals(products, prices, human, rng) if goal_kind == "human" else \
            synthetic_goals(products, prices, rng)
    except (KeyError, TypeError, AttributeError) as exc:
        raise EnvError(f"webshop: {root}: malformed instruction entry ({exc})") from None
    if not goals:
        raise EnvError(f"webshop: {root}: no {goal_kind} goals (no instruction with attributes)")
    return Catalog(key=("data_dir", data_dir, goal_kind, num_products, seed), products=products,
                   prices=prices, goals=split_goals(goals), nouns=heuristic_nouns)
