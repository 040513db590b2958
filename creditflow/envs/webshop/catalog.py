"""The product catalog and the shopping goals: generated offline (seeded) or loaded from WebShop's files.

Products are dicts with WebShop's field names (``engine.py::load_products``): ``asin``, ``name`` (=
``Title``), ``Title``, ``category``, ``product_category`` (``A › B › C``), ``query``, ``Attributes``,
``BulletPoints``, ``Description``, ``options`` (``{name: [values]}``, lower case), ``Price`` (the shown
tag), ``pricing``, ``Reviews``, ``Rating``. Goals use ``goal.py``'s fields: ``asin``, ``name``,
``query``, ``category``, ``product_category``, ``instruction_text``, ``attributes``, ``goal_options``,
``price_upper``. Both go straight into :func:`creditflow.envs.webshop.reward.webshop_reward`.

The generated catalog is a pure function of ``(seed, num_products)``: one ``random.Random(seed)`` draws
every product in turn, then every goal. Each product is the goal of one instruction, built as WebShop
builds its synthetic goals: a few of the product's attributes, one value of each option group, and a
price bound drawn from the next multiples of ten above the price. Every fifth product's goal is a test
goal, so train and test goals never share a product.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from creditflow.envs.webshop import vocab
from creditflow.envs.webshop.reward import catalog_nouns
from creditflow.envs.webshop.search import SearchIndex

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # goal.py
NO_PRICE_BOUND = 1_000_000.0  # goal.py's price_upper when fewer than two bounds lie above the price
TEST_EVERY = 5  # generated catalog: products 4, 9, 14, ... give the test goals
SEARCH_CACHE_SIZE = 4096


@dataclass
class Catalog:
    """Products, their prices, the goals of each split, the search index and the noun function."""

    key: tuple  # what rebuilds it through the in-process cache (pickling keeps only this)
    products: list[dict]
    prices: list[float]  # the price the reward compares with price_upper (WebShop's product_prices)
    goals: dict[str, list[dict]]  # "train" / "test"
    nouns: Callable[[str], list[str]]
    index: SearchIndex = field(repr=False, default=None)
    by_asin: dict[str, int] = field(repr=False, default_factory=dict)
    _search_cache: dict[str, tuple[int, ...]] = field(repr=False, default_factory=dict)

    def __post_init__(self):
        if self.index is None:
            self.index = SearchIndex([search_document(p) for p in self.products])
        self.by_asin = {p["asin"]: i for i, p in enumerate(self.products)}

    def search(self, query: str) -> tuple[int, ...]:
        """Top-50 product indices for ``query`` (cached: every env on this catalog shares the results)."""
        hit = self._search_cache.get(query)
        if hit is None:
            if len(self._search_cache) >= SEARCH_CACHE_SIZE:
                self._search_cache.clear()
            hit = self._search_cache[query] = tuple(self.index.search(query))
        return hit


def search_document(product: dict) -> str:
    """What the index sees of a product: title, description and attributes."""
    return " ".join([product["Title"], product["Description"], " ".join(product["Attributes"])])


# -- price bounds and instructions (goal.py) ------------------------------------------------------------


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """goal.py: two of the (up to) four multiples of ten above the price, keep the larger; with fewer
    than two above it there is no bound (1e6, no price text)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_BOUND, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _article(phrase: str) -> str:
    return "an" if phrase[:1] in "aeiou" else "a"


def instruction_text(opener: str, type_phrase: str, attributes: list[str], goal_options: dict[str, str],
                     price_text: str) -> str:
    """"i need a <type> that is <attr> and <attr>, with <name>: <value>, and <name>: <value>, and price
    lower than X dollars" (synthetic goals' option text ``', and '.join(f'{k}: {v}')``)."""
    text = f"{opener} {_article(type_phrase)} {type_phrase}"
    if attributes:
        text += " that is " + " and ".join(attributes)
    if goal_options:
        text += ", with " + ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    return text + price_text


# -- the generated catalog ------------------------------------------------------------------------------


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _title_case(phrase: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in phrase.split())


def _feature(rng: random.Random, attribute: str, type_phrase: str) -> str:
    template = rng.choice(vocab.FEATURE_TEMPLATES)
    return template.format(A=attribute[:1].upper() + attribute[1:], a=attribute, t=type_phrase)


def generate_product(rng: random.Random, ptype: vocab.ProductType, taken: set[str]) -> tuple[dict, float]:
    """One product of type ``ptype`` and its price. Some attributes show in the title, some only in
    the bullet points, and the rest only in the attribute list."""
    brand = rng.choice(vocab.BRANDS)
    type_phrase = ptype.title.lower()
    attributes = rng.sample(ptype.attributes, rng.randint(3, min(5, len(ptype.attributes))))
    n_title = rng.randint(0, 2)
    title = f"{brand} {ptype.title}"
    if n_title:
        title += " - " + ", ".join(_title_case(a) for a in attributes[:n_title])
    featured = [a for a in attributes[n_title:] if rng.random() < 0.6]
    bullets = [_feature(rng, a, type_phrase) for a in featured]
    bullets += rng.sample(vocab.GENERIC_FEATURES, rng.randint(1, 2))
    description = " ".join([
        rng.choice(vocab.DESCRIPTION_OPENERS).format(b=brand, t=type_phrase),
        f"It is part of our {ptype.path.split(' › ')[-1].lower()} range.",
        rng.choice(vocab.DESCRIPTION_CLOSERS),
    ])
    options = {}
    for name, values in ptype.options:
        k = rng.randint(min(2, len(values)), len(values))
        keep = set(rng.sample(values, k))
        options[name] = [v for v in values if v in keep]
    lo, hi = ptype.price
    price = round(rng.uniform(lo, hi), 2)
    reviews = []
    for _ in range(rng.randint(1, 3)):
        score, review_title = rng.choice(vocab.REVIEW_TITLES)
        reviews.append({"title": review_title, "score": score,
                        "body": rng.choice(vocab.REVIEW_BODIES).format(t=type_phrase)})
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1)
    product = {
        "asin": _asin(rng, taken), "name": title, "Title": title, "category": ptype.category,
        "product_category": ptype.path, "query": ptype.query, "Attributes": list(attributes),
        "BulletPoints": bullets, "Description": description, "options": options,
        "Price": f"${price:.2f}", "pricing": [price], "Reviews": reviews, "Rating": rating,
        "type_title": ptype.title,
    }
    return product, price


def generate_goal(rng: random.Random, product: dict, price: float) -> dict:
    """A synthetic-style goal for ``product``: 1-3 of its attributes, one value per option group."""
    attributes = list(product["Attributes"])
    goal_attributes = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
    goal_options = {name: rng.choice(values) for name, values in product["options"].items()}
    upper, price_text = price_bound(price, rng)
    type_phrase = product["type_title"].lower()
    return {
        "asin": product["asin"], "name": product["name"], "query": product["query"],
        "category": product["category"], "product_category": product["product_category"],
        "instruction_text": instruction_text(rng.choice(vocab.INSTRUCTION_OPENERS), type_phrase,
                                             goal_attributes, goal_options, price_text),
        "attributes": goal_attributes, "goal_options": goal_options, "price_upper": upper,
    }


@lru_cache(maxsize=8)
def generated_catalog(seed: int = 0, num_products: int = 1000) -> Catalog:
    """The seeded catalog (cached in-process: every env with the same seed and size shares it)."""
    rng = random.Random(seed)
    types = vocab.PRODUCT_TYPES
    taken: set[str] = set()
    products, prices = [], []
    for i in range(num_products):
        # every type appears before any repeats; afterwards types are drawn at random
        ptype = types[i] if i < len(types) else rng.choice(types)
        product, price = generate_product(rng, ptype, taken)
        products.append(product)
        prices.append(price)
    goals: dict[str, list[dict]] = {"train": [], "test": []}
    for i, (product, price) in enumerate(zip(products, prices)):
        split = "test" if i % TEST_EVERY == TEST_EVERY - 1 else "train"
        goals[split].append(generate_goal(rng, product, price))
    return Catalog(key=("generated", seed, num_products), products=products, prices=prices, goals=goals,
                   nouns=catalog_nouns)
