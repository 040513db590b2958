"""WebShop-style shopping: generated catalog or WebShop's data files, BM25 search, WebShop's reward."""

from creditflow.envs.webshop.catalog import Catalog, generated_catalog
from creditflow.envs.webshop.env import WebShopEnv, parse_action
from creditflow.envs.webshop.expert import expert_plan
from creditflow.envs.webshop.pages import PageState
from creditflow.envs.webshop.reward import (
    catalog_nouns,
    default_nouns,
    heuristic_nouns,
    normalize_color,
    token_set_ratio,
    webshop_reward,
)
from creditflow.envs.webshop.search import SearchIndex
from creditflow.envs.webshop.webshop_data import load_webshop_catalog

__all__ = [
    "Catalog",
    "PageState",
    "SearchIndex",
    "WebShopEnv",
    "catalog_nouns",
    "default_nouns",
    "expert_plan",
    "generated_catalog",
    "heuristic_nouns",
    "load_webshop_catalog",
    "normalize_color",
    "parse_action",
    "token_set_ratio",
    "webshop_reward",
]
