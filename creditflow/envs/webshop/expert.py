"""The scripted shopper that writes WebShop demonstrations (``WebShopEnv.expert_actions``).

It acts on what a shopper sees: it searches with the instruction's key words, opens the result on the
first page whose title shares the most of them among those within the price bound, clicks for each
option group the value the instruction names, and buys. It never looks at the goal product or at the
hidden attribute list, so it buys a near miss now and then (a product whose title looks right but lacks
an attribute, or that lacks the asked-for option value), as human demonstrations do.
"""

from __future__ import annotations

import re

from creditflow.envs.webshop import pages
from creditflow.envs.webshop.catalog import Catalog
from creditflow.envs.webshop.search import tokenize

_PRICE_BOUND = re.compile(r",?\s*and price lower than\s+(\d+(?:\.\d+)?)\s+dollars")
_PRICE_TAG = re.compile(r"\d+(?:\.\d+)?")


def price_limit(instruction: str) -> float | None:
    m = _PRICE_BOUND.search(instruction.lower())
    return float(m.group(1)) if m else None


def search_query(instruction: str) -> str:
    """The instruction's key words: what comes before its option list and price bound, stop words out."""
    text = _PRICE_BOUND.sub("", instruction.lower())
    core = text.rsplit(", with ", 1)[0]
    words = tokenize(core) or tokenize(text)
    return " ".join(words) or "product"


def choose_option(instruction: str, name: str, values: list[str]) -> str | None:
    """The value of option group ``name`` the instruction asks for: one written as ``name: value``,
    else one that occurs in it as whole words; the longest when several do."""
    text = _PRICE_BOUND.sub("", instruction.lower())
    named = [v for v in values if f"{name}: {v}" in text]
    if named:
        return max(named, key=len)
    present = [v for v in values if re.search(rf"(?<![\w]){re.escape(v)}(?![\w])", text)]
    return max(present, key=len) if present else None


def _shown_price(tag: str) -> float:
    m = _PRICE_TAG.search(tag.replace(",", ""))
    return float(m.group(0)) if m else 0.0


def best_match(results: tuple[int, ...], catalog: Catalog, query: str, limit: float | None) -> int:
    """The first-page product within the price bound whose title shares most query words (rank breaks
    ties)."""
    words = set(query.split())

    def score(rank_item):
        rank, i = rank_item
        product = catalog.products[i]
        affordable = limit is None or _shown_price(product["Price"]) <= limit
        return (affordable, len(words & set(tokenize(product["Title"]))), -rank)

    first_page = list(enumerate(pages.page_products(results, 1)))
    return max(first_page, key=score)[1]


def expert_plan(state: pages.PageState, instruction: str, catalog: Catalog) -> list[str]:
    """Actions from ``state`` to a purchase (empty once bought).

    The scripted shopper's path is: search its query, open its best match, click the options the instruction
    asks for, buy. From a state on that path the plan continues it (another results page of the query: page
    to the match; a sub page of the match: back to it; its item page: the options still missing, then buy);
    from any other state it goes back to search and starts over. So the plan's first action is the expert's
    policy in every state, as the audit's ε-expert needs (docs/audit.md)."""
    if state.page == "done":
        return []
    back = f"click[{pages.BACK_TO_SEARCH.lower()}]"
    prev = f"click[{pages.PREV_PAGE.lower()}]"
    query = search_query(instruction)
    restart = ([] if state.page == "search" else [back]) + [f"search[{query}]"]
    results = catalog.search(query)
    if not results:
        return restart
    item = best_match(results, catalog, query, price_limit(instruction))
    product = catalog.products[item]
    buttons = pages.option_buttons(product)
    wanted = []
    for name, values in product["options"].items():
        value = choose_option(instruction, name, values)
        if value is not None and buttons.get(value) == name:
            wanted.append((name, value))
    on_query = state.query == " ".join(query.lower().split())
    if state.item == item and state.page in ("item", "description", "features", "reviews"):
        chosen = state.chosen()
        return ([prev] if state.page != "item" else []) + [f"click[{v}]" for n, v in wanted if chosen.get(n) != v] \
            + [f"click[{pages.END_BUTTON.lower()}]"]
    buy = [f"click[{v}]" for _, v in wanted] + [f"click[{pages.END_BUTTON.lower()}]"]
    open_item = [f"click[{product['asin'].lower()}]"]
    if on_query and state.page in ("results", "item"):  # another item of the query: back to its results
        target = results.index(item) // pages.PRODUCT_WINDOW + 1
        here = state.results_page
        moves = [prev] if state.page == "item" else []
        step = f"click[{pages.NEXT_PAGE.lower()}]" if target > here else prev
        return moves + [step] * abs(target - here) + open_item + buy
    return restart + open_item + buy
