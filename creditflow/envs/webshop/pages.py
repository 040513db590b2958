"""WebShop's page flow as a small state machine, and its text rendering.

Pages and buttons follow WebShop's templates and ``SimServer.receive`` (``envs/web_agent_text_env.py``):

* search page: the search bar (``search[query]``);
* results page: ``Back to Search``, ``< Prev`` (from page 2 on), ``Next >``, one link per product (its
  ASIN); 10 products a page out of the top 50;
* item page: ``Back to Search``, ``< Prev`` (back to the results page), one button per option value,
  ``Description``, ``Features``, ``Reviews``, ``Buy Now``;
* Description / Features / Reviews pages: ``Back to Search``, ``< Prev`` (back to the item page);
* done page after ``Buy Now``.

Clicking an option value sets that option group; the chosen options live until the next results page,
as in WebShop's session. Button texts are matched lower-cased, as WebShop's ``text_to_clickable`` keys
are. Observations use WebShop's simple text mode (visible texts joined by ``[SEP]``); the item page
also says which options are chosen, as its ``text_rich`` mode does ("You have clicked ...").

Two deliberate differences: ``Next >`` is shown only while there is a next page (WebShop's template
always shows it and leads to an empty page), and a search is only possible on the search page, where
the search bar is (WebShop's text env also runs a search typed on other pages).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from creditflow.envs.webshop.catalog import Catalog

PRODUCT_WINDOW = 10  # results per page (engine.py)
SEP = " [SEP] "
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, END_BUTTON = "Back to Search", "< Prev", "Next >", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
PAGES = ("search", "results", "item", "description", "features", "reviews", "done")


@dataclass(frozen=True)
class PageState:
    """Where the shopper is: page, query, results page, item (product index) and chosen options."""

    page: str = "search"
    query: str = ""
    results_page: int = 1
    item: int | None = None
    options: tuple[tuple[str, str], ...] = ()  # (option name, value), sorted by name

    def chosen(self) -> dict[str, str]:
        return dict(self.options)

    def key(self, catalog: Catalog) -> str:
        """state_key: page + query + results page + item + chosen options."""
        asin = catalog.products[self.item]["asin"] if self.item is not None else "-"
        opts = ",".join(f"{k}={v}" for k, v in self.options) or "-"
        return f"{self.page}|q={self.query or '-'}|p={self.results_page}|item={asin}|opts={opts}"


def page_products(results: tuple[int, ...], page: int) -> tuple[int, ...]:
    return results[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]


def has_next(results: tuple[int, ...], page: int) -> bool:
    return page * PRODUCT_WINDOW < len(results)


def option_buttons(product: dict) -> dict[str, str]:
    """Option value -> option name. A value in two groups belongs to the later one (as in WebShop,
    where the later radio button overwrites the earlier in ``text_to_clickable``)."""
    return {value: name for name, values in product["options"].items() for value in values}


def clickables(state: PageState, catalog: Catalog) -> list[str]:
    """The page's buttons, lower-cased, in WebShop's order (buttons, product links, option values)."""
    if state.page == "results":
        results = catalog.search(state.query)
        buttons = [BACK_TO_SEARCH]
        if state.results_page > 1:
            buttons.append(PREV_PAGE)
        if has_next(results, state.results_page):
            buttons.append(NEXT_PAGE)
        links = [catalog.products[i]["asin"] for i in page_products(results, state.results_page)]
        return [b.lower() for b in buttons + links]
    if state.page == "item":
        product = catalog.products[state.item]
        buttons = [BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, END_BUTTON]
        return [b.lower() for b in buttons] + list(option_buttons(product))
    if state.page in ("description", "features", "reviews"):
        return [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]
    return []


def search(state: PageState, query: str) -> PageState | None:
    """``search[query]``: only from the search page; the query is lower-cased (WebShop) and its spaces
    collapsed."""
    if state.page != "search":
        return None
    return PageState(page="results", query=" ".join(query.lower().split()), results_page=1)


def click(state: PageState, button: str, catalog: Catalog) -> PageState | None:
    """``click[button]``: the next state, or None when ``button`` is not on the page."""
    button = " ".join(button.lower().split())
    if button not in clickables(state, catalog):
        return None
    if button == BACK_TO_SEARCH.lower():
        return PageState()
    if state.page == "results":
        if button == NEXT_PAGE.lower():
            return replace(state, results_page=state.results_page + 1)
        if button == PREV_PAGE.lower():
            return replace(state, results_page=state.results_page - 1)
        item = next(i for i in page_products(catalog.search(state.query), state.results_page)
                    if catalog.products[i]["asin"].lower() == button)
        return replace(state, page="item", item=item, options=())
    if state.page == "item":
        if button == PREV_PAGE.lower():
            return replace(state, page="results", item=None, options=())
        if button == END_BUTTON.lower():
            return replace(state, page="done")
        sub = next((s for s in SUB_PAGES if s.lower() == button), None)
        if sub is not None:
            return replace(state, page=sub.lower())
        name = option_buttons(catalog.products[state.item])[button]
        chosen = state.chosen()
        chosen[name] = button
        return replace(state, options=tuple(sorted(chosen.items())))
    # a sub page: "< prev" goes back to the item page with the options kept
    return replace(state, page="item")


def render(state: PageState, catalog: Catalog, instruction: str, score: float | None = None) -> str:
    """The page as WebShop's simple text observation."""
    if state.page == "search":
        return SEP.join(["WebShop", "Instruction:", instruction, "Search"])
    if state.page == "results":
        results = catalog.search(state.query)
        parts = [BACK_TO_SEARCH, f"Page {state.results_page} (Total results: {len(results)})"]
        if state.results_page > 1:
            parts.append(PREV_PAGE)
        if has_next(results, state.results_page):
            parts.append(NEXT_PAGE)
        for i in page_products(results, state.results_page):
            p = catalog.products[i]
            parts += [p["asin"], p["Title"], p["Price"]]
        return SEP.join(parts)
    product = catalog.products[state.item]
    if state.page == "item":
        parts = [BACK_TO_SEARCH, PREV_PAGE]
        for name, values in product["options"].items():
            parts += [name, *values]
        parts += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *SUB_PAGES,
                  END_BUTTON]
        clicked = "".join(f"You have clicked {v}.\n" for _, v in state.options)
        return clicked + SEP.join(parts)
    if state.page == "description":
        return SEP.join([BACK_TO_SEARCH, PREV_PAGE, product["Description"]])
    if state.page == "features":
        return SEP.join([BACK_TO_SEARCH, PREV_PAGE, *product["BulletPoints"]])
    if state.page == "reviews":
        parts = [BACK_TO_SEARCH, PREV_PAGE]
        for r in product["Reviews"]:
            parts += [f"\"{r['title']}\"", str(r["score"]), r["body"]]
        return SEP.join(parts)
    chosen = ", ".join(f"{k}: {v}" for k, v in state.options) or "none"
    return SEP.join(["Thank you for shopping with us!", "Purchased", product["asin"], product["Title"],
                     f"Options: {chosen}", "Your score (min 0.0, max 1.0)", f"{score or 0.0:.4f}"])
