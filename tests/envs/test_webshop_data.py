"""Loading WebShop's own data files (``make("webshop", data_dir=...)``) on a tiny hand-made copy."""

import json

import pytest

from creditflow.envs import EnvError, make
from creditflow.envs.webshop.webshop_data import load_webshop_catalog, parse_pricing, split_goals


def raw_product(asin, name, query, pricing="$19.99", options=None, small="Great shoes."):
    return {"asin": asin, "name": name, "category": "fashion", "query": f"  {query.upper()} ",
            "product_category": "Clothing, Shoes & Jewelry › Men › Shoes › Athletic",
            "full_description": f"{name}. A comfortable pair for running.", "small_description": small,
            "pricing": pricing, "images": ["https://example.invalid/a.jpg"], "brand": "Acme",
            "customization_options": options if options is not None else {
                "Color": [{"value": "Black/White", "image": None}, {"value": "Navy Blue", "image": None}],
                "Size": [{"value": "9", "image": None}, {"value": "10", "image": None}]}}


@pytest.fixture()
def data_dir(tmp_path):
    products = [
        raw_product("B000000001", "Acme Men's Running Shoes Breathable", "men's running shoes"),
        raw_product("B000000002", "Zoom Trail Sneakers for Men", "men's running shoes", pricing="$30.00 - $50.00",
                    small=["Rubber sole", "Lace up"]),
        raw_product("B000000001", "duplicate asin", "x"),  # skipped: repeated asin
        raw_product("nan", "no asin", "x"),  # skipped
        raw_product("B0000000033", "asin too long", "x"),  # skipped: longer than 10
        raw_product("B000000004", "Cozy Wool Socks", "wool socks", pricing=None, options={"Size": None}),
    ]
    attributes = {
        "B000000001": {"attributes": ["breathable mesh", "rubber sole"], "instruction": "i want running shoes",
                       "instruction_attributes": ["breathable mesh"]},
        "B000000002": {"attributes": ["lace up"], "instruction": "i need trail sneakers",
                       "instruction_attributes": ["lace up"]},
    }
    human = {
        "B000000001": [{"instruction": "i need breathable running shoes in black white, size 10.",
                        "instruction_attributes": ["breathable mesh"], "instruction_options": ["black | white", "10"]},
                       {"instruction": "no attributes here", "instruction_attributes": [], "instruction_options": []}],
        "B000000004": [{"instruction": "find warm wool socks", "instruction_attributes": ["warm"],
                        "instruction_options": []}],
    }
    reviews = [{"asin": "B000000002", "average_rating": 4.5,
                "reviews": [{"title": "Nice", "stars": 5, "review": "Fits well."}]}]
    for name, obj in (("items_shuffle_1000.json", products), ("items_ins_v2_1000.json", attributes),
                      ("items_human_ins.json", human), ("reviews.json", reviews)):
        (tmp_path / name).write_text(json.dumps(obj))
    return tmp_path


def test_loader_uses_webshop_fields_and_rules(data_dir):
    cat = load_webshop_catalog(str(data_dir), "human", None, 0)
    assert [p["asin"] for p in cat.products] == ["B000000001", "B000000002", "B000000004"]
    p1, p2, p4 = cat.products
    assert p1["Title"] == p1["name"] == "Acme Men's Running Shoes Breathable"
    assert p1["query"] == "men's running shoes"  # lower-cased and stripped
    assert p1["options"] == {"color": ["black | white", "navy blue"], "size": ["9", "10"]}
    assert p1["BulletPoints"] == ["Great shoes."] and p2["BulletPoints"] == ["Rubber sole", "Lace up"]
    assert p1["Attributes"] == ["breathable mesh", "rubber sole"] and p4["Attributes"] == ["DUMMY_ATTR"]
    assert p4["options"] == {} and p4["pricing"] == [100.0] and p4["Price"] == "$100.0"
    assert p2["pricing"] == [30.0, 50.0] and p2["Price"] == "$30.0 to $50.0" and 30 <= cat.prices[1] <= 50
    assert p2["Reviews"] == [{"title": "Nice", "score": 5, "body": "Fits well."}] and p2["Rating"] == 4.5
    assert p1["Rating"] == "N.A."
    goals = cat.goals["train"] + cat.goals["test"]
    assert len(goals) == 2 and len(cat.goals["test"]) == 1  # the instruction without attributes is skipped
    g = next(g for g in goals if g["asin"] == "B000000001")
    assert g["instruction_text"].startswith("i need breathable running shoes in black white, size 10, and price "
                                            "lower than ")
    assert g["goal_options"] == ["black | white", "10"] and g["attributes"] == ["breathable mesh"]
    assert g["price_upper"] in (30.0, 40.0, 50.0)  # two of the next four multiples of ten above 19.99


def test_synthetic_goals_one_per_option_combination(data_dir):
    cat = load_webshop_catalog(str(data_dir), "synthetic", None, 0)
    texts = sorted(g["instruction_text"].split(", and price")[0] for g in cat.goals["train"] + cat.goals["test"])
    assert len(texts) == 8  # 2 colours x 2 sizes for each of two products
    assert "i want running shoes with color: black | white, and size: 10" in texts


def test_env_runs_on_the_data(data_dir):
    env = make("webshop", data_dir=str(data_dir), split="test")
    obs, info = env.reset(seed=0)
    assert info["task"] in obs
    plan = env.expert_actions()
    for action in plan:
        obs, reward, term, trunc, info = env.step(action)
        assert info["action_valid"], action
    assert term and 0.0 <= reward <= 1.0


def test_pricing_parser():
    assert parse_pricing("$1,299.00", "x") == ([1299.0], "$1299.0")
    assert parse_pricing("", "x") == ([100.0], "$100.0")
    with pytest.raises(EnvError, match="cannot read the price"):
        parse_pricing("$abc", "x")


def test_split_follows_webshop_baselines():
    goals = [{"i": i} for i in range(2000)]
    split = split_goals(goals)
    assert len(split["test"]) == 500 and len(split["train"]) == 500  # 500-1499 are WebShop's dev goals
    assert not {g["i"] for g in split["test"]} & {g["i"] for g in split["train"]}


@pytest.mark.parametrize("breakage, message", [
    (lambda d: (d / "items_shuffle_1000.json").unlink(), "has no products file"),
    (lambda d: (d / "items_human_ins.json").unlink(), "has no human instructions file"),
    (lambda d: (d / "items_ins_v2_1000.json").write_text("{not json"), "cannot read"),
    (lambda d: (d / "items_shuffle_1000.json").write_text(json.dumps([{"asin": "B1"}])), "missing or malformed"),
    (lambda d: (d / "items_human_ins.json").write_text("{}"), "no human goals"),
])
def test_bad_data_dir_is_one_line_error(data_dir, breakage, message):
    breakage(data_dir)
    with pytest.raises(EnvError, match=message) as exc:
        make("webshop", data_dir=str(data_dir))
    assert "\n" not in str(exc.value)


def test_file_instead_of_dir(tmp_path):
    f = tmp_path / "items.json"
    f.write_text("[]")
    with pytest.raises(EnvError, match="is not a directory"):
        make("webshop", data_dir=str(f))
