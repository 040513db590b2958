"""WebShop's reward on hand-computed cases: every branch of get_reward (v2), option by option."""

import pytest

from creditflow.envs.webshop.reward import (
    attribute_matches,
    catalog_nouns,
    default_nouns,
    heuristic_nouns,
    normalize_color,
    option_matches,
    token_set_ratio,
    type_reward,
    webshop_reward,
)


def words(text):
    """A test noun function: every word is a noun, so overlaps are easy to count by hand."""
    return text.lower().split()


def product(**kw):
    base = {"Title": "Acme Shampoo", "Attributes": ["sulfate free", "natural ingredients"], "BulletPoints": [],
            "Description": "", "query": "shampoo", "product_category": "beauty › hair care › shampoo",
            "name": "acme shampoo"}
    base.update(kw)
    return base


def goal(**kw):
    base = {"attributes": ["sulfate free"], "goal_options": {"size": "16 fl oz"}, "price_upper": 30.0,
            "query": "shampoo", "product_category": "beauty › hair care › shampoo", "name": "acme shampoo"}
    base.update(kw)
    return base


# -- fuzzy matching and colours (thefuzz / normalize.py) -------------------------------------------------


def test_token_set_ratio_is_thefuzz_rounded_and_preprocessed():
    assert token_set_ratio("Essential-Oils!", "essential oils") == 100  # case and punctuation dropped
    assert token_set_ratio("essential oil", "essential oils") == 96  # 2*13/27 = 96.3 -> 96
    assert token_set_ratio("large", "x-large") == 100  # one token set inside the other
    assert token_set_ratio("machine wash", "machine washable") == 86  # 85.7 rounds up: a match
    assert token_set_ratio("", "anything") == 0
    assert token_set_ratio("café", "caf") == 100  # thefuzz drops code points 128-255


def test_normalize_color_takes_first_color_set_entry():
    assert normalize_color("light blue") == "blue"  # 'blue' precedes 'light' in COLOR_SET
    assert normalize_color("navy blue") == "blue"
    assert normalize_color("standard") == "tan"  # a substring, as in WebShop
    assert normalize_color("Navy") == "Navy"  # case-sensitive: no entry is a substring
    assert normalize_color("x-large") == "x-large"


# -- attributes ------------------------------------------------------------------------------------------


def test_attribute_fuzzy_match_against_attributes():
    assert attribute_matches(product(Attributes=["essential oil"]), ["essential oils"]) == 1


def test_attribute_fallbacks_title_bullets_description_and_miss():
    p = product(Attributes=["tea bag"], Title="Acme Tea Tree Shampoo", BulletPoints=["Made with Essential Oils."],
                Description="Best shampoo, NATURAL INGREDIENTS inside")
    assert attribute_matches(p, ["tea tree"]) == 1  # title
    assert attribute_matches(p, ["essential oils"]) == 1  # bullet points, lower-cased
    assert attribute_matches(p, ["natural ingredients"]) == 1  # description, lower-cased
    assert attribute_matches(p, ["paraben free"]) == 0
    assert attribute_matches(p, ["tea tree", "essential oils", "natural ingredients", "paraben free"]) == 3


def test_attribute_is_matched_case_sensitively_in_text():
    # goal.py lower-cases the product text, not the goal attribute
    assert attribute_matches(product(Attributes=[], Title="Tea Tree"), ["Tea Tree"]) == 0


# -- options ---------------------------------------------------------------------------------------------


def test_size_must_match_exactly():
    p = product()
    assert option_matches(p, ["x-large"], {"size": "x-large"}) == 1
    assert option_matches(p, ["x-large"], {"size": "large"}) == 0  # fuzzy would say 100
    assert option_matches(p, ["X-Large"], {"Size": "x-large"}) == 1  # both sides lower-cased


def test_other_options_match_fuzzily_after_colour_normalisation():
    p = product()
    assert option_matches(p, ["light blue"], {"color": "navy blue"}) == 1  # both become 'blue'
    assert option_matches(p, ["pack of 12"], {"style": "12 pack"}) == 1  # {12, pack} inside {12, of, pack}: 100
    assert option_matches(p, ["100 pack"], {"style": "12 pack"}) == 0  # token_set_ratio 80
    assert option_matches(p, ["24 pack"], {"style": "12 pack"}) == 1  # token_set_ratio 86 (a fuzzy false friend)
    assert option_matches(p, ["cool powder snow"], {"color": "powder snow"}) == 1
    assert option_matches(p, ["red"], {"color": "black"}) == 0


def test_unchosen_goal_option_found_in_product_text():
    p = product(Title="Acme Shampoo 16 fl oz", BulletPoints=["Lavender scent"], Description="")
    assert option_matches(p, ["16 fl oz", "lavender"], {}) == 2  # title, then bullet points
    assert option_matches(p, ["32 fl oz"], {}) == 0
    # a goal option already matched by a chosen option is not counted again from the text
    assert option_matches(p, ["16 fl oz"], {"size": "16 fl oz"}) == 1


def test_loop_runs_over_chosen_options():
    p = product()
    # two chosen options hit the same goal option: WebShop counts both
    assert option_matches(p, ["blue"], {"color": "navy blue", "trim": "light blue"}) == 2
    # a chosen option without any goal option to match adds nothing
    assert option_matches(p, [], {"color": "red"}) == 0


# -- r_type ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("purchased_kw, goal_kw, r_type, title_score", [
    # query match keeps 1.0 although the noun overlap is only 0.15 (in [0.1, 0.2])
    ({"name": "a b c"}, {"name": " ".join("abcdefghijklmnopqrst")}, 1.0, 0.15),
    # no query match, two category levels shared -> 1.0
    ({"name": "a b c", "query": "q2", "product_category": "x › hair care › beauty"},
     {"name": " ".join("abcdefghijklmnopqrst")}, 1.0, 0.15),
    # one category level shared, overlap 0.15 -> 0.5
    ({"name": "a b c", "query": "q2", "product_category": "beauty › x › y"},
     {"name": " ".join("abcdefghijklmnopqrst")}, 0.5, 0.15),
    # nothing else, but overlap 0.25 > 0.2 -> 1.0
    ({"name": "a", "query": "q2", "product_category": "x › y › z"}, {"name": "a b c d"}, 1.0, 0.25),
    # overlap exactly 0.2 is not > 0.2 -> 0.5
    ({"name": "a", "query": "q2", "product_category": "x › y › z"}, {"name": "a b c d e"}, 0.5, 0.2),
    # overlap < 0.1 -> 0.1 even with a query match
    ({"name": "a"}, {"name": " ".join("abcdefghijklmnopqrstuvwxyz")}, 0.1, 1 / 26),
    # no shared noun -> 0 even with query and category match
    ({"name": "z"}, {"name": "a b"}, 0.0, 0.0),
    # the goal name has no nouns: overlap 0.2; with a query match 1.0 ...
    ({"name": "a"}, {"name": ""}, 1.0, 0.2),
    # ... without one 0.5
    ({"name": "a", "query": "q2", "product_category": "x › y › z"}, {"name": ""}, 0.5, 0.2),
])
def test_type_reward_rules_in_order(purchased_kw, goal_kw, r_type, title_score):
    info = type_reward(product(**purchased_kw), goal(**goal_kw), words)
    assert info["r_type"] == r_type
    assert info["title_score"] == pytest.approx(title_score)


def test_category_overlap_ignores_order_and_duplicates():
    reordered = product(product_category="shampoo › beauty › x", query="q2")
    assert type_reward(reordered, goal(), words)["category_match"]
    assert not type_reward(product(product_category="a › a › beauty", query="q2"), goal(), words)["category_match"]


# -- the total -------------------------------------------------------------------------------------------


def test_perfect_purchase_scores_one():
    total, info = webshop_reward(product(), goal(), 25.0, {"size": "16 fl oz"}, nouns=words)
    assert total == 1.0
    assert info["r_att"] == 1.0 and info["r_option"] == 1.0 and info["r_price"] is True


def test_total_formula_hand_computed():
    g = goal(attributes=["sulfate free", "paraben free", "tea tree"],
             goal_options={"size": "16 fl oz", "scent": "lavender"}, price_upper=20.0)
    p = product(BulletPoints=["With tea tree oil."])
    # attributes: sulfate free (fuzzy) + tea tree (bullets) = 2 of 3; options: size exact 1, scent 'mint' vs
    # 'lavender' 0; price 25 > 20: 0.  (2 + 1 + 0) / (3 + 2 + 1) = 0.5
    total, info = webshop_reward(p, g, 25.0, {"size": "16 fl oz", "scent": "mint"}, nouns=words)
    assert total == pytest.approx(0.5)
    assert (info["num_attr_matches"], info["num_option_matches"], info["r_price"]) == (2, 1, False)
    assert info["w_att"] == pytest.approx(0.5) and info["w_option"] == pytest.approx(2 / 6)
    assert info["w_price"] == pytest.approx(1 / 6)


def test_total_is_scaled_by_r_type():
    # same as the perfect purchase, but a different product line with one category level in common
    p = product(query="conditioner", product_category="beauty › x › y", name="acme conditioner bottle spray")
    g = goal(name="acme shampoo bottle spray pump")  # overlap 3/5 = 0.6 > 0.2 -> r_type 1
    assert webshop_reward(p, g, 25.0, {"size": "16 fl oz"}, nouns=words)[0] == 1.0
    g = goal(name="acme shampoo pump gel cap")  # overlap 1/5 = 0.2 -> r_type 0.5
    assert webshop_reward(p, g, 25.0, {"size": "16 fl oz"}, nouns=words)[0] == 0.5


def test_goal_options_as_list_and_price_edge():
    g = goal(goal_options=["16 fl oz", "lavender"])
    # price equal to the bound is ok; (1 + 1 + 1) / (1 + 2 + 1)
    total, info = webshop_reward(product(), g, 30.0, {"size": "16 fl oz"}, nouns=words)
    assert total == pytest.approx(0.75) and info["r_price"] is True


def test_no_goal_options_and_option_overcount():
    total, info = webshop_reward(product(), goal(goal_options={}), 25.0, {"color": "red"}, nouns=words)
    assert total == 1.0 and "r_option" not in info
    # WebShop's quirk kept: two chosen options matching one goal option count twice -> (1 + 2 + 1) / 3
    total, _ = webshop_reward(product(), goal(goal_options={"color": "blue"}), 25.0,
                              {"color": "navy blue", "trim": "light blue"}, nouns=words)
    assert total == pytest.approx(4 / 3)


def test_price_upper_must_be_positive():
    with pytest.raises(ValueError, match="price_upper"):
        webshop_reward(product(), goal(price_upper=0), 1.0, {})


# -- nouns stand-in --------------------------------------------------------------------------------------


def test_noun_stand_ins():
    assert catalog_nouns("Acme Women's Yoga Pants - High Waist") == ["yoga", "pants"]
    assert default_nouns("Acme Women's Yoga Pants - High Waist") == ["yoga", "pants"]
    assert heuristic_nouns("Saireed UL Listed 2 Prong Power Cord, Black") == ["saireed", "ul", "listed", "prong",
                                                                              "power", "cord"]
    cord = "Saireed UL Listed 2 Prong Power Cord"
    assert default_nouns(cord) == heuristic_nouns(cord)
    # the default noun function gives a generated product and its own goal full overlap
    p = product(name="Lumora Shampoo - Sulfate Free", query="x")
    assert webshop_reward(p, goal(name="Lumora Shampoo - Sulfate Free", query="y"), 1.0, {"size": "16 fl oz"})[0] == 1.0
