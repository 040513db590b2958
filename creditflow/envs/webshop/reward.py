"""WebShop's purchase reward (``web_agent_site/engine/goal.py::get_reward``, the v2 branch), offline.

``total = (attribute matches + option matches + price ok) / (#goal attributes + #goal options + 1) × r_type``

* **attributes** (``get_attribute_reward``): a goal attribute matches when its fuzzy ``token_set_ratio``
  with one of the product's ``Attributes`` is > 85, else when it occurs in the lower-cased ``Title``,
  the joined ``BulletPoints`` or the ``Description``.
* **options** (``get_option_reward``): the loop runs over the *chosen* options. Values of both sides
  go through WebShop's colour normalisation and are lower-cased. A chosen option named ``size`` counts
  when its value equals a goal option; any other counts when it fuzzily matches (> 85) a goal option.
  Goal options still unmatched then count when they occur in the title, bullet points or description.
* **price ok** = ``price <= price_upper``.
* **r_type** (``get_type_reward``): 1, then 0.5 unless the queries are equal, ≥ 2 category levels
  overlap or the title-noun overlap is > 0.2, then 0.1 if the overlap is < 0.1, then 0 if it is 0. The
  overlap is |nouns(purchased name) ∩ nouns(goal name)| / |nouns(goal name)|, 0.2 when the goal name
  has no nouns.

Fuzzy scores are ``thefuzz.fuzz.token_set_ratio``'s: thefuzz wraps rapidfuzz, so we call rapidfuzz with
thefuzz's pre-processing (drop code points 128-255, then rapidfuzz's ``default_process``) and its
rounding to an integer. What we leave out, and why: the v2 branch also counts synonyms from
PyMultiDictionary, which looks words up online; and spaCy's ``en_core_web_lg`` POS tags, which cannot be
downloaded here, are replaced by the ``nouns`` callable (:func:`default_nouns` when not given).
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from creditflow.envs.webshop.vocab import CATALOG_NOUNS

# WebShop's normalize.py COLOR_SET, in its order (the first one found in a value wins).
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull",
    "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet",
    "walnut", "wheat", "white", "wine", "yellow",
)

EXACT_MATCH_OPTIONS = ("size",)  # v2's EXACT_MATCH_OPTS
FUZZY_THRESHOLD = 85  # "score > 85" everywhere in goal.py

_LATIN1_HIGH = {i: None for i in range(128, 256)}  # thefuzz.utils.ascii_only drops exactly these
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

Nouns = Callable[[str], Iterable[str]]


def normalize_color(value: str) -> str:
    """WebShop's ``normalize_color``: the first ``COLOR_SET`` entry that is a (case-sensitive) substring
    of ``value``, else ``value`` unchanged (so ``"light blue"`` -> ``"blue"``, ``"standard"`` -> ``"tan"``)."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _thefuzz_process(text: object) -> str:
    return default_process(str(text).translate(_LATIN1_HIGH))


def token_set_ratio(a: object, b: object) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)``: rapidfuzz's score on thefuzz-processed text, rounded."""
    return int(round(fuzz.token_set_ratio(_thefuzz_process(a), _thefuzz_process(b))))


def fuzzy_match(a: object, b: object) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


# -- nouns: the offline stand-in for spaCy's POS tags ---------------------------------------------------

# Words the heuristic never counts as nouns: function words, units, sizes, colours and common modifiers.
_NOT_NOUNS = frozenset((
    "a an the and or but for with without of in on at to from by as is are be it its this that these those "
    "i me my we our you your he she they them their his her who what which than then so too very not no "
    "all any each every both few more most other some such only own same can will just also into over "
    "under up down out off about after before new best top great good high low big small large medium "
    "mini extra super ultra long short soft hard light heavy dark bright warm cool hot cold thick thin "
    "slim wide narrow full half double single multi non anti free pro plus premium classic modern vintage "
    "natural organic original portable adjustable wireless waterproof lightweight durable compatible "
    "men men's mens women women's womens kids kid's unisex adult boys girls baby "
    "x xl xxl xs s m l oz fl ml lb lbs g kg mm cm inch inches ft feet pack count pcs piece pieces set "
    "one two three four five six seven eight ten dozen").split()) | frozenset(COLOR_SET)


def heuristic_nouns(text: str) -> list[str]:
    """Fallback noun finder: lower-case words of ``text`` that are not numbers and not in a list of
    function words, units, sizes, colours and common product modifiers. It over-counts nouns compared
    with a POS tagger (brand names and unusual adjectives get through), which raises title overlaps
    a little; no maintained PyPI package ships an English POS model that runs offline."""
    words = _WORD.findall(text.lower())
    return [w for w in words if len(w) > 1 and not w[0].isdigit() and w not in _NOT_NOUNS]


def catalog_nouns(text: str) -> list[str]:
    """Product-type nouns of the generated catalog (``vocab.CATALOG_NOUNS``) that occur in ``text``."""
    return [w for w in _WORD.findall(text.lower()) if w in CATALOG_NOUNS]


def default_nouns(text: str) -> list[str]:
    """``webshop_reward``'s default: the generated catalog's product-type nouns found in ``text``; for text
    with none of them (titles from other sources), :func:`heuristic_nouns`."""
    return catalog_nouns(text) or heuristic_nouns(text)


# -- the four parts of get_reward ------------------------------------------------------------------------


def type_reward(purchased: Mapping, goal: Mapping, nouns: Nouns = default_nouns) -> dict:
    """``get_type_reward``: r_type with the query / category / title-noun evidence behind it."""
    query_match = purchased["query"] == goal["query"]
    purchased_path = {part.strip() for part in purchased["product_category"].split("›")}
    goal_path = {part.strip() for part in goal["product_category"].split("›")}
    category_match = len(purchased_path & goal_path) >= 2
    purchased_nouns = {n.lower() for n in nouns(purchased["name"])}
    goal_nouns = {n.lower() for n in nouns(goal["name"])}
    title_score = len(purchased_nouns & goal_nouns) / len(goal_nouns) if goal_nouns else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _in_product_text(value: str, purchased: Mapping) -> bool:
    """WebShop's fallback: ``value`` is a substring of the lower-cased title, bullet points or description."""
    return (value in purchased["Title"].lower()
            or value in " ".join(purchased["BulletPoints"]).lower()
            or value in purchased["Description"].lower())


def attribute_matches(purchased: Mapping, goal_attributes: list[str]) -> int:
    """``get_attribute_reward``'s count: fuzzy against ``Attributes``, else a substring of the text."""
    matches = 0
    for g_attr in goal_attributes:
        if any(fuzzy_match(p_attr, g_attr) for p_attr in purchased["Attributes"]):
            matches += 1
        elif _in_product_text(g_attr, purchased):
            matches += 1
    return matches


def option_matches(purchased: Mapping, goal_options: list, chosen: Mapping) -> int:
    """v2's ``get_option_reward`` count (its synonym look-up left out).

    A chosen option can match a goal option another one already matched; WebShop counts both, so the
    count can exceed ``len(goal_options)`` in that rare case, and so can the total reward exceed 1."""
    chosen_norm = {str(k).lower(): normalize_color(str(v)).lower() for k, v in chosen.items()}
    goals = [normalize_color(str(o)).lower() for o in goal_options]
    matches = 0
    found: set[str] = set()
    for name, value in chosen_norm.items():
        if name in EXACT_MATCH_OPTIONS:
            if value in goals:
                matches += 1
                found.add(value)
            continue
        for g_option in goals:
            if fuzzy_match(g_option, value):
                matches += 1
                found.add(g_option)
                break
    if len(found) < len(goals):
        matches += sum(1 for g in goals if g not in found and _in_product_text(g, purchased))
    return matches


def _goal_option_values(goal_options) -> list:
    return list(goal_options.values()) if isinstance(goal_options, Mapping) else list(goal_options)


def webshop_reward(purchased: Mapping, goal: Mapping, price: float, options: Mapping, *,
                   nouns: Nouns | None = None) -> tuple[float, dict]:
    """WebShop's ``get_reward(purchased, goal, price, options, verbose=True)``.

    ``purchased`` needs ``Title``, ``Attributes``, ``BulletPoints``, ``Description``, ``query``,
    ``product_category``, ``name``; ``goal`` needs ``attributes``, ``goal_options`` (dict or list),
    ``price_upper``, ``query``, ``product_category``, ``name``; ``options`` is ``{option name: value}``
    as chosen. ``nouns`` maps text to its lower-case nouns (default :func:`default_nouns`). Returns
    ``(total, info)`` with WebShop's verbose fields plus the raw match counts.
    """
    if not goal["price_upper"] > 0:
        # goal.py leaves r_price None there and then fails adding it; WebShop's goals never do this
        raise ValueError(f"goal price_upper must be > 0, got {goal['price_upper']!r}")
    type_info = type_reward(purchased, goal, nouns or default_nouns)
    goal_attributes = list(goal["attributes"])
    goal_options = _goal_option_values(goal["goal_options"])
    n_attr = attribute_matches(purchased, goal_attributes)
    n_opt = option_matches(purchased, goal_options, options)
    price_ok = price <= goal["price_upper"]
    denominator = len(goal_attributes) + len(goal["goal_options"]) + 1
    total = (n_attr + n_opt + int(price_ok)) / denominator * type_info["r_type"]
    info = {
        **type_info,
        "r_att": n_attr / len(goal_attributes) if goal_attributes else None,
        "w_att": len(goal_attributes) / denominator,
        "r_price": price_ok,
        "w_price": 1 / denominator,
        "num_attr_matches": n_attr,
        "num_option_matches": n_opt,
    }
    if goal_options:
        info["r_option"] = n_opt / len(goal_options)
        info["w_option"] = len(goal["goal_options"]) / denominator
    return total, info
