"""The webshop env: catalog, search, page flow, actions, expert, snapshot/replay, options."""

import pickle
import random

import pytest

from creditflow.envs import INVALID_ACTION_PREFIX, EnvError, check_determinism, env_options, make, replay
from creditflow.envs.webshop import SearchIndex, WebShopEnv, generated_catalog, parse_action, webshop_reward
from creditflow.envs.webshop.pages import PRODUCT_WINDOW


@pytest.fixture(scope="module")
def env():
    return make("webshop")


def results_of(env):
    return env.catalog.search(env.state.query)


def broad_query(env):
    """A query with the full 50 results (5 pages)."""
    for q in ("easy", "free", "design", "long", "resistant"):
        if len(env.catalog.search(q)) == 50:
            return q
    raise AssertionError("no broad query found")


# -- catalog ---------------------------------------------------------------------------------------------


def test_generated_catalog_shape():
    cat = generated_catalog(0, 1000)
    assert len(cat.products) == 1000 and len({p["asin"] for p in cat.products}) == 1000
    assert len({p["category"] for p in cat.products}) >= 8
    for p in cat.products:
        assert len(p["product_category"].split(" › ")) == 3
        assert p["Title"] and p["query"] and p["Description"] and p["BulletPoints"] and p["Attributes"]
        assert p["options"] and all(len(v) >= 2 for v in p["options"].values())
        assert p["Price"].startswith("$")
    assert len(cat.goals["train"]) == 800 and len(cat.goals["test"]) == 200
    assert not {g["asin"] for g in cat.goals["train"]} & {g["asin"] for g in cat.goals["test"]}


def test_goals_are_instructions_from_their_product():
    cat = generated_catalog(0, 1000)
    for g in cat.goals["test"][:50]:
        p = cat.products[cat.by_asin[g["asin"]]]
        price = cat.prices[cat.by_asin[g["asin"]]]
        text = g["instruction_text"]
        assert text.startswith(("i need", "i am looking for", "i want", "find me", "i'm looking for"))
        assert ", with " in text and text.endswith(f"and price lower than {g['price_upper']:.2f} dollars")
        assert set(g["attributes"]) <= set(p["Attributes"]) and all(a in text for a in g["attributes"])
        assert all(p["options"][k].count(v) == 1 and f"{k}: {v}" in text for k, v in g["goal_options"].items())
        assert price < g["price_upper"] <= price + 40 and g["price_upper"] % 10 == 0
        # the goal product bought with the goal options scores 1
        assert webshop_reward(p, g, price, g["goal_options"], nouns=cat.nouns)[0] == 1.0


def test_catalog_is_seeded_and_cached():
    assert generated_catalog(0, 1000) is generated_catalog(0, 1000)
    a, b = generated_catalog(1, 200), generated_catalog(2, 200)
    assert [p["Title"] for p in a.products] != [p["Title"] for p in b.products]
    generated_catalog.cache_clear()
    assert [p["Title"] for p in generated_catalog(1, 200).products] == [p["Title"] for p in a.products]


# -- search ----------------------------------------------------------------------------------------------


def test_bm25_ranks_by_words_not_substrings():
    index = SearchIndex(["red cotton shirt", "blue cotton shirt with red trim", "redwood table", "shirt shirt"])
    assert index.search("red shirt")[:2] == [0, 1]
    assert 2 not in index.search("red")  # 'redwood' is another word
    assert index.search("the of with") == []  # only stop words
    assert index.search("unknownword") == []


def test_search_on_catalog_finds_the_goal_type(env):
    cat = env.catalog
    hits = cat.search("yoga mat non slip")
    assert len(hits) == 50
    assert cat.products[hits[0]]["query"] == "yoga mat"
    assert cat.search("yoga mat non slip") == hits  # deterministic (and cached)


# -- page flow -------------------------------------------------------------------------------------------


def test_search_results_pagination_and_back(env):
    obs, info = env.reset(seed=0)
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] ") and info["admissible_actions"] is None
    assert info["available_actions"] == {"has_search_bar": True, "clickables": []}
    q = broad_query(env)
    obs, r, term, trunc, info = env.step(f"search[{q.upper()}]")
    assert info["action_valid"] and r == 0 and not term
    assert info["state_key"] == f"results|q={q}|p=1|item=-|opts=-"
    assert obs.startswith("Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] ")
    adm = info["admissible_actions"]
    first = results_of(env)[:PRODUCT_WINDOW]
    assert adm == ["click[back to search]", "click[next >]"] + [
        f"click[{env.catalog.products[i]['asin'].lower()}]" for i in first]
    for i in first:
        assert env.catalog.products[i]["Title"] in obs
    obs, *_, info = env.step("click[Next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    assert info["state_key"].endswith("p=2|item=-|opts=-")
    for _ in range(3):
        obs, *_, info = env.step("click[next >]")
    assert "Page 5" in obs and "click[next >]" not in info["admissible_actions"]
    assert not env.step("click[next >]")[-1]["action_valid"]  # no page 6
    obs, *_, info = env.step("click[< prev]")
    assert "Page 4" in obs
    obs, *_, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["state_key"] == "search|q=-|p=1|item=-|opts=-"


def test_item_page_options_tabs_and_buy(env):
    env.reset(seed=5)
    env.step("search[bluetooth headphones]")
    item = next(i for i in results_of(env)[:10] if len(env.catalog.products[i]["options"]) == 2)
    p = env.catalog.products[item]
    asin = p["asin"]
    obs, *_, info = env.step(f"click[{asin.lower()}]")
    assert info["page"] == "item" and p["Title"] in obs and f"Price: {p['Price']}" in obs
    assert obs.startswith("Back to Search [SEP] < Prev [SEP] ") and obs.endswith(
        "Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    (n1, v1), (n2, v2) = [(n, vals) for n, vals in p["options"].items()]
    for v in v1 + v2:
        assert f"click[{v}]" in info["admissible_actions"]
    obs, *_, info = env.step(f"click[{v1[0]}]")
    obs, *_, info = env.step(f"click[{v2[0]}]")
    obs, *_, info = env.step(f"click[{v1[1]}]")  # re-choosing a group replaces its value
    opts = ",".join(f"{k}={v}" for k, v in sorted({n1: v1[1], n2: v2[0]}.items()))
    item_key = info["state_key"]
    assert item_key.endswith(f"item={asin}|opts={opts}")
    assert f"You have clicked {v1[1]}." in obs and f"You have clicked {v1[0]}." not in obs
    # tabs
    obs, *_, info = env.step("click[description]")
    assert obs == f"Back to Search [SEP] < Prev [SEP] {p['Description']}"
    assert info["admissible_actions"] == ["click[back to search]", "click[< prev]"]
    assert not env.step("click[buy now]")[-1]["action_valid"]  # no Buy Now on a tab
    obs, *_, info = env.step("click[< prev]")
    assert info["page"] == "item" and info["state_key"] == item_key  # options kept
    obs, *_ = env.step("click[features]")
    assert all(b in obs for b in p["BulletPoints"])
    env.step("click[< prev]")
    obs, *_ = env.step("click[reviews]")
    assert all(r["body"] in obs for r in p["Reviews"])
    env.step("click[< prev]")
    chosen = env.state.chosen()
    obs, reward, term, trunc, info = env.step("click[Buy Now]")
    expected, _ = webshop_reward(p, env.goal, env.catalog.prices[item], chosen, nouns=env.catalog.nouns)
    assert term and not trunc and reward == info["score"] == expected
    assert info["won"] == (expected == 1.0) and info["purchased_asin"] == asin
    assert info["purchased_options"] == chosen and obs.startswith("Thank you for shopping with us!")
    assert info["admissible_actions"] == []


def test_prev_from_item_returns_to_same_results_page_and_clears_options(env):
    env.reset(seed=2)
    env.step(f"search[{broad_query(env)}]")
    env.step("click[next >]")
    page2 = env.observation()
    asin = env.catalog.products[results_of(env)[PRODUCT_WINDOW]]["asin"]
    env.step(f"click[{asin}]")  # ids are matched case-insensitively
    value = env.catalog.products[env.state.item]["options"]
    env.step(f"click[{next(iter(value.values()))[0]}]")
    obs, *_, info = env.step("click[< prev]")
    assert obs == page2 and info["state_key"].endswith("p=2|item=-|opts=-")


def test_no_results_page(env):
    env.reset(seed=0)
    obs, *_, info = env.step("search[qwertyuiop zxcvb]")
    assert info["action_valid"] and obs == "Back to Search [SEP] Page 1 (Total results: 0)"
    assert info["admissible_actions"] == ["click[back to search]"]


def test_step_limit_truncates_with_zero_reward():
    env = make("webshop", max_steps=3)
    env.reset(seed=0)
    env.step("search[shampoo]")
    env.step("click[next >]")
    _, reward, term, trunc, info = env.step("click[< prev]")
    assert (reward, term, trunc, info["score"], info["won"]) == (0.0, False, True, 0.0, False)
    with pytest.raises(EnvError):
        env.step("click[back to search]")


# -- malformed actions -----------------------------------------------------------------------------------


MALFORMED = ["click[no such button]", "search[]", "search[   ]", "search[red shoes", "searchred shoes]",
             "search[red]]", "search[[red]", "click[]", "buy", "", "   ", "x" * 10_000,
             "search[" + "a" * 10_000 + "]", INVALID_ACTION_PREFIX + "search[shoes]", "SEARCH", "click",
             "jump[shoes]", "search(shoes)", None, 5, b"search[shoes]", ["search[shoes]"]]


@pytest.mark.parametrize("page", ["search", "results", "item"])
def test_malformed_actions_are_invalid_no_ops(page):
    env = make("webshop", max_steps=100)
    env.reset(seed=4)
    if page != "search":
        env.step("search[dog bed memory foam]")
    if page == "item":
        env.step(f"click[{env.catalog.products[results_of(env)[0]]['asin']}]")
    before_obs, before_key = env.observation(), env.state.key(env.catalog)
    actions = MALFORMED + (["click[buy now]", "click[description]"] if page == "results" else []) + \
        (["search[dog bed]"] if page != "search" else ["click[back to search]", "click[next >]"])
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert info["action_valid"] is False, action
        assert (obs, reward, term, trunc, info["state_key"]) == (before_obs, 0.0, False, False, before_key), action


def test_parse_action():
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("  Click [Buy Now] ") == ("click", "Buy Now")
    assert parse_action("search[a [b] c]") == ("search", "a [b] c")  # balanced brackets inside are fine
    assert parse_action("search[a ]b[ c]") == ("invalid", None)
    assert parse_action(3.5) == ("invalid", None)


# -- expert ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_buys_well_but_not_always_perfectly(split):
    env = make("webshop", split=split)
    scores = []
    for seed in range(100):
        env.reset(seed=seed)
        plan = env.expert_actions()
        assert plan[0].startswith("search[") and plan[-1] == "click[buy now]" and len(plan) <= env.max_steps
        for action in plan:
            obs, reward, term, trunc, info = env.step(action)
            assert info["action_valid"], action
        assert term and reward == info["score"]
        scores.append(info["score"])
    success = sum(s == 1.0 for s in scores) / len(scores)
    assert sum(scores) / len(scores) > 0.85 and 0.5 < success < 1.0


def test_expert_continues_from_any_page(env):
    env.reset(seed=7)
    env.step("search[garden hose]")
    env.step("click[next >]")
    env.step(f"click[{env.catalog.products[results_of(env)[PRODUCT_WINDOW]]['asin']}]")
    env.step("click[features]")
    plan = env.expert_actions()
    assert plan[0] == "click[back to search]"
    for action in plan:
        *_, term, trunc, info = env.step(action)
        assert info["action_valid"]
    assert term and env.expert_actions() == []


def test_expert_continues_its_own_path(env):
    """On the expert's path the plan continues it instead of starting over: from its item page with an option
    missing, from a sub page of its item, from another item of its query; each ends in the same purchase."""
    env.reset(seed=3)
    full = env.expert_actions()
    assert full[0].startswith("search[") and full[-1] == "click[buy now]"
    snap = env.snapshot()
    env.step(full[0])
    assert env.expert_actions() == full[1:]  # its results page: open the match
    env.step(full[1])
    assert env.expert_actions() == full[2:]  # its item page: the options, then buy
    env.step("click[reviews]")
    assert env.expert_actions() == ["click[< prev]", *full[2:]]
    env.restore(snap)
    env.step(full[0])
    others = [a for a in env._info()["admissible_actions"] if a not in full and a.startswith("click[b0")]
    env.step(others[0])  # another product of the same query
    plan = env.expert_actions()
    assert plan[:2] == ["click[< prev]", full[1]] and plan[2:] == full[2:]
    for action in plan:
        *_, term, trunc, info = env.step(action)
        assert info["action_valid"]
    ref = make("webshop")
    ref.reset(seed=3)
    for action in full:
        *_, ref_info = ref.step(action)
    assert term and info["score"] == ref_info["score"] and info["purchased_asin"] == ref_info["purchased_asin"]


# -- snapshot, replay, determinism, pickling -------------------------------------------------------------


def episode_actions(env, seed):
    """A wandering episode: search, pages, an item, tabs, options, an invalid action, then buy."""
    env.reset(seed=seed)
    actions = ["search[water bottle leak proof]", "click[next >]", "click[< prev]", "click[nonsense]"]
    for a in actions:
        env.step(a)
    asin = env.catalog.products[results_of(env)[3]]["asin"].lower()
    actions.append(f"click[{asin}]")
    env.step(actions[-1])
    values = [v for vals in env.catalog.products[env.state.item]["options"].values() for v in vals]
    actions += ["click[reviews]", "click[< prev]", f"click[{values[0]}]", f"click[{values[-1]}]", "click[buy now]"]
    return actions


def test_snapshot_equals_replay():
    env = make("webshop")
    actions = episode_actions(env, 11)
    obs0, _ = env.reset(seed=11)
    observations = [obs0] + [env.step(a)[0] for a in actions]
    for cut in (0, 2, 4, 5, 8, len(actions)):
        src = make("webshop")
        src.reset(seed=11)
        for a in actions[:cut]:
            src.step(a)
        snap = src.snapshot()
        fresh = make("webshop")
        fresh.reset(seed=99)
        obs, info = fresh.restore(snap)
        replayed = replay(make("webshop"), 11, actions[:cut], observations[:cut + 1])
        assert obs == replayed.observation == observations[cut]
        assert info["state_key"] == replayed.info["state_key"] and info["score"] == replayed.info["score"]
        if cut < len(actions):  # both continue identically
            assert fresh.step(actions[cut])[:3] == (observations[cut + 1], *replay(
                make("webshop"), 11, actions[:cut + 1]).rewards[-1:], cut + 1 == len(actions))


def test_restore_refuses_another_catalog_or_split():
    env = make("webshop")
    env.reset(seed=1)
    snap = env.snapshot()
    for other in (make("webshop", split="test"), make("webshop", num_products=60)):
        with pytest.raises(EnvError, match="cannot be restored"):
            other.restore(snap)


def test_determinism_and_local_rng():
    env = make("webshop")
    actions = episode_actions(env, 3)
    trace = check_determinism(lambda: make("webshop"), seed=3, actions=actions)
    assert len(trace) == len(actions) + 1 and trace[-1][0] == "click[buy now]"
    env.reset(seed=3)
    trace = check_determinism(lambda: make("webshop"), seed=3, actions=env.expert_actions())
    assert trace[-1][2] > 0  # the expert's purchase pays
    check_determinism(lambda: make("webshop", split="test"), seed=8, actions=actions[:4])
    random.seed(1)
    a = make("webshop").reset(seed=5)[0]
    random.seed(2)
    assert make("webshop").reset(seed=5)[0] == a


def test_pickle_keeps_state_not_catalog():
    env = make("webshop")
    env.reset(seed=1)
    env.step("search[coffee medium roast]")
    blob = pickle.dumps(env)
    assert len(blob) < 5000
    clone = pickle.loads(blob)
    assert clone.catalog is env.catalog and clone.observation() == env.observation()
    assert clone.step("click[next >]")[0] == env.step("click[next >]")[0]


def test_seeds_wrap_over_goals_and_splits_differ():
    train, test = make("webshop"), make("webshop", split="test")
    assert train.reset(seed=800 + 3)[1]["task"] == train.reset(seed=3)[1]["task"]
    assert train.reset(seed=0)[1]["task"] != test.reset(seed=0)[1]["task"]
    assert len(train) == 800 and len(test) == 200


# -- options ---------------------------------------------------------------------------------------------


def test_registered_with_options():
    opts = env_options("webshop")
    assert opts == {"split": "train", "num_products": None, "catalog_seed": 0, "data_dir": None, "goals": None,
                    "max_steps": 15}
    assert isinstance(make("webshop", num_products=120, catalog_seed=3), WebShopEnv)


@pytest.mark.parametrize("kwargs, message", [
    ({"split": "valid"}, "split must be one of train, test"),
    ({"split": 1}, "option split must be a string, got 1"),  # envs.make's type check, before the env's own
    ({"num_products": "abc"}, "num_products must be an integer"),
    ({"num_products": 6.5}, "num_products must be an integer"),
    ({"num_products": "500"}, "num_products must be an integer"),
    ({"num_products": True}, "num_products must be an integer"),
    ({"num_products": 10}, r"num_products must be in \[50, 200000\]"),
    ({"catalog_seed": -1}, "catalog_seed must be in"),
    ({"catalog_seed": 1.0}, "catalog_seed must be an integer"),
    ({"max_steps": 0}, "max_steps must be in"),
    ({"max_steps": "maybe"}, "max_steps must be an integer"),
    ({"goals": "human"}, "goals=.* goes with data_dir"),
    ({"data_dir": 5}, "option data_dir must be a string or None, got 5"),
    ({"data_dir": "/no/such/webshop/dir"}, "data_dir '/no/such/webshop/dir' is not a directory"),
    ({"bogus": 1}, "has no option"),
])
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(EnvError, match=message) as exc:
        make("webshop", **kwargs)
    assert "\n" not in str(exc.value)


def test_search_keeps_jax_off_the_gpu_unless_the_user_chose():
    """bm25s runs JAX at import; JAX must not preallocate a GPU's memory under the policy (see search.py)."""
    import os
    import subprocess
    import sys

    code = "import os, creditflow.envs.webshop.search; print(os.environ.get('JAX_PLATFORMS'))"
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    run = lambda e: subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True)
    assert run(env).stdout.strip() == "cpu"
    assert run({**env, "JAX_PLATFORMS": "cuda"}).stdout.strip() == "cuda"
