"""Static vocabulary of the generated WebShop catalog: product types, brands and text pieces.

Each :class:`ProductType` fixes what WebShop's scraped products carry per listing: the category path
(``product_category``, ``A › B › C``), the top-level ``category`` (WebShop has five: beauty, fashion,
food, furniture, electronics; we use ten), the ``query`` the product was listed under, the attribute
pool its ``Attributes`` are drawn from (short phrases, as in WebShop's ``items_ins_v2`` attribute lists)
and the option groups with their values (lower case, as WebShop's loader stores them).

``nouns`` are the product-type nouns of the type's title: they are what the offline noun stand-in
(:func:`creditflow.envs.webshop.reward.catalog_nouns`) recognises in titles, in place of the spaCy
POS tags WebShop's type reward uses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    category: str  # WebShop's short top-level ``category``
    path: str  # ``product_category``: "A › B › C"
    title: str  # the product-type phrase used in titles, e.g. "Women's Yoga Pants"
    query: str  # the search phrase the product was listed under (WebShop's ``query``)
    nouns: tuple[str, ...]  # product-type nouns of ``title`` (lower case)
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, values)
    price: tuple[float, float]  # uniform price range in dollars


def _t(category, path, title, query, nouns, attributes, options, price) -> ProductType:
    return ProductType(category, path, title, query, tuple(nouns.split()), tuple(attributes.split(", ")),
                       tuple((name, tuple(values.split(", "))) for name, values in options), price)


COLORS_BASIC = "black, white, grey, navy blue, red, pink, green, beige"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # -- beauty -----------------------------------------------------------------------------------
    _t("beauty", "Beauty & Personal Care › Hair Care › Shampoo", "Shampoo", "shampoo", "shampoo",
       "sulfate free, paraben free, natural ingredients, dry hair, color treated hair, tea tree oil, "
       "cruelty free, damaged hair",
       [("size", "8 fl oz, 12 fl oz, 16 fl oz, 33.8 fl oz"), ("scent", "lavender, coconut, mint, unscented, citrus")],
       (6, 35)),
    _t("beauty", "Beauty & Personal Care › Makeup › Eyeshadow", "Eyeshadow Palette", "eyeshadow palette",
       "eyeshadow palette",
       "long lasting, highly pigmented, cruelty free, easy to apply, travel size, matte finish, shimmer finish, "
       "paraben free",
       [("color", "nude, smoky, rose gold, bronze, rainbow"), ("style", "12 colors, 18 colors, 35 colors")],
       (8, 45)),
    _t("beauty", "Beauty & Personal Care › Makeup › Lipstick", "Lipstick", "lipstick", "lipstick",
       "long lasting, matte finish, moisturizing formula, cruelty free, vegan formula, waterproof, smudge proof, "
       "shea butter",
       [("color", "red, pink, nude, berry, coral, plum"), ("size", "1 count, 2 count, 3 count")],
       (5, 30)),
    _t("beauty", "Beauty & Personal Care › Skin Care › Face Moisturizer", "Face Moisturizer", "face moisturizer",
       "face moisturizer",
       "hyaluronic acid, sensitive skin, oil free, fragrance free, anti aging, spf 30, dry skin, non comedogenic",
       [("size", "1.7 oz, 2.5 oz, 3.4 oz")],
       (10, 60)),
    _t("beauty", "Beauty & Personal Care › Hair Care › Hair Extensions", "Clip In Hair Extensions",
       "hair extensions", "hair extensions",
       "natural looking, human hair, easy to apply, heat resistant, long lasting, straight hair, wavy hair, "
       "double weft",
       [("color", "black, dark brown, blonde, auburn, ash blonde"), ("size", "14 inch, 18 inch, 22 inch")],
       (20, 120)),
    # -- fashion ----------------------------------------------------------------------------------
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Leggings", "Women's Yoga Pants", "women's yoga pants",
       "yoga pants",
       "high waist, tummy control, machine washable, moisture wicking, side pockets, four way stretch, "
       "squat proof, quick dry",
       [("color", "black, navy blue, heather grey, burgundy, olive green"),
        ("size", "small, medium, large, x-large, xx-large")],
       (15, 45)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Shirts", "Men's Polo Shirt", "men's polo shirt", "polo shirt",
       "slim fit, regular fit, moisture wicking, machine washable, cotton blend, wrinkle free, short sleeve, "
       "button down collar",
       [("color", "white, black, navy, red, royal blue, grey"), ("size", "small, medium, large, x-large, xx-large")],
       (12, 40)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Shoes", "Men's Running Shoes", "men's running shoes", "shoes",
       "non slip, rubber sole, lightweight design, breathable mesh, arch support, memory foam, lace up, wide width",
       [("color", "black white, grey, navy blue, all black, red"), ("size", "7, 8, 9, 10, 11, 12")],
       (30, 110)),
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Coats, Jackets & Vests", "Women's Winter Jacket",
       "women's winter jacket", "winter jacket",
       "faux fur lined, water resistant, detachable hood, zip closure, warm fleece, windproof, machine washable, "
       "quilted design",
       [("color", "black, khaki, wine red, army green, camel"), ("size", "small, medium, large, x-large")],
       (40, 150)),
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Dresses", "Women's Summer Dress", "women's summer dress",
       "summer dress",
       "floral print, v neck, short sleeve, knee length, flowy fabric, elastic waist, casual style, side pockets",
       [("color", "blue floral, white, black, pink, yellow"), ("size", "small, medium, large, x-large")],
       (18, 60)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Watches", "Men's Wrist Watch", "men's wrist watch",
       "wrist watch",
       "stainless steel, water resistant, quartz movement, leather strap, date display, luminous hands, "
       "scratch resistant, analog display",
       [("color", "silver black, gold, rose gold, all black, blue"), ("style", "leather band, metal band, mesh band")],
       (25, 200)),
    # -- electronics ------------------------------------------------------------------------------
    _t("electronics", "Electronics › Headphones › Over-Ear Headphones", "Wireless Bluetooth Headphones",
       "bluetooth headphones", "headphones",
       "noise cancelling, long battery life, built in microphone, foldable design, hi fi stereo, fast charging, "
       "protein earmuffs, wired mode",
       [("color", "black, white, blue, rose gold"), ("style", "standard, with carrying case")],
       (25, 180)),
    _t("electronics", "Electronics › Cell Phone Accessories › Cases", "Phone Case", "phone case", "phone case",
       "shockproof, slim fit, wireless charging compatible, raised edges, kickstand, clear back, drop protection, "
       "anti scratch",
       [("color", "clear, black, pink, navy blue, purple"), ("style", "iphone 13, iphone 14, iphone 15, galaxy s23")],
       (8, 30)),
    _t("electronics", "Electronics › Computer Accessories › Cables", "USB C Charging Cable", "usb c cable",
       "usb cable",
       "fast charging, braided nylon, data sync, durable connector, tangle free, high speed transfer",
       [("size", "3 ft, 6 ft, 10 ft"), ("color", "black, white, red")],
       (6, 25)),
    _t("electronics", "Electronics › Portable Audio › Speakers", "Portable Bluetooth Speaker", "bluetooth speaker",
       "speaker",
       "waterproof, long battery life, deep bass, loud stereo sound, built in microphone, usb charging, "
       "outdoor use, shockproof",
       [("color", "black, blue, red, camo")],
       (20, 150)),
    _t("electronics", "Electronics › Computer Accessories › Mice", "Wireless Mouse", "wireless mouse", "mouse",
       "ergonomic design, silent click, rechargeable battery, adjustable dpi, usb receiver, plug and play, "
       "compact size, long battery life",
       [("color", "black, grey, white, pink")],
       (8, 60)),
    _t("electronics", "Electronics › Camera & Photo › Security Cameras", "Wireless Security Camera",
       "security camera", "security camera",
       "night vision, motion detection, two way audio, 1080p hd, easy installation, cloud storage, weatherproof, "
       "wifi connection",
       [("style", "1 camera, 2 cameras, 4 cameras"), ("color", "white, black")],
       (25, 200)),
    # -- furniture --------------------------------------------------------------------------------
    _t("furniture", "Home & Kitchen › Furniture › Home Office Chairs", "Ergonomic Office Chair", "office chair",
       "office chair",
       "lumbar support, adjustable height, high back, breathable mesh, padded armrests, easy assembly, "
       "swivel wheels, heavy duty",
       [("color", "black, grey, white, blue")],
       (60, 300)),
    _t("furniture", "Home & Kitchen › Furniture › Bookcases", "Bookshelf", "bookshelf", "bookshelf",
       "open shelves, easy assembly, solid wood, space saving, industrial style, anti tip design, "
       "storage shelves, living room",
       [("color", "rustic brown, black, white, walnut"), ("size", "3 tier, 4 tier, 5 tier")],
       (40, 200)),
    _t("furniture", "Home & Kitchen › Furniture › Coffee Tables", "Coffee Table", "coffee table", "coffee table",
       "tempered glass, storage shelf, solid wood, modern design, easy assembly, metal frame, living room, lift top",
       [("color", "walnut, black, white, grey")],
       (50, 280)),
    _t("furniture", "Home & Kitchen › Furniture › Sofas & Couches", "Loveseat Sofa", "loveseat sofa",
       "loveseat sofa",
       "velvet fabric, mid century, easy assembly, living room, solid wood legs, high density foam, "
       "small spaces, removable cushions",
       [("color", "grey, navy blue, green, beige, pink")],
       (150, 700)),
    _t("furniture", "Home & Kitchen › Furniture › Beds", "Platform Bed Frame", "bed frame", "bed frame",
       "metal frame, no box spring needed, under bed storage, noise free, easy assembly, wooden slats, "
       "upholstered headboard, heavy duty",
       [("size", "twin, full, queen, king"), ("color", "black, grey, white")],
       (80, 450)),
    # -- food -------------------------------------------------------------------------------------
    _t("food", "Grocery & Gourmet Food › Beverages › Coffee", "Ground Coffee", "ground coffee", "coffee",
       "medium roast, dark roast, fair trade, usda organic, low acid, arabica beans, rich flavor, resealable bag",
       [("flavor name", "original, vanilla, hazelnut, french roast, caramel"), ("size", "12 ounce, 24 ounce, 2 pound")],
       (7, 30)),
    _t("food", "Grocery & Gourmet Food › Beverages › Tea", "Herbal Tea Bags", "herbal tea", "tea bags",
       "caffeine free, organic ingredients, non gmo, individually wrapped, gluten free, sugar free, "
       "natural flavor, kosher certified",
       [("flavor name", "chamomile, peppermint, ginger lemon, hibiscus, rooibos"),
        ("size", "20 count, 40 count, 100 count")],
       (4, 25)),
    _t("food", "Grocery & Gourmet Food › Snacks › Nutrition Bars", "Protein Bars", "protein bars", "protein bars",
       "high protein, gluten free, low sugar, keto friendly, non gmo, plant based, individually wrapped, low carb",
       [("flavor name", "chocolate peanut butter, cookie dough, salted caramel, blueberry"),
        ("size", "12 count, 24 count")],
       (12, 45)),
    _t("food", "Grocery & Gourmet Food › Pantry Staples › Oils", "Extra Virgin Olive Oil", "olive oil",
       "olive oil",
       "cold pressed, first harvest, non gmo, glass bottle, kosher certified, usda organic, rich flavor, "
       "single origin",
       [("size", "16.9 fl oz, 25.3 fl oz, 33.8 fl oz, 1 gallon")],
       (9, 60)),
    _t("food", "Grocery & Gourmet Food › Snacks › Jerky", "Beef Jerky", "beef jerky", "beef jerky",
       "high protein, low fat, gluten free, grass fed, no added sugar, resealable bag, ready to eat, keto friendly",
       [("flavor name", "original, teriyaki, peppered, sweet and spicy"), ("size", "3.25 ounce, 10 ounce, 16 ounce")],
       (6, 35)),
    # -- kitchen ----------------------------------------------------------------------------------
    _t("kitchen", "Home & Kitchen › Kitchen & Dining › Cookware", "Nonstick Frying Pan", "frying pan",
       "frying pan",
       "nonstick coating, induction compatible, oven safe, dishwasher safe, pfoa free, stay cool handle, "
       "even heating, scratch resistant",
       [("size", "8 inch, 10 inch, 12 inch"), ("color", "black, granite, red")],
       (15, 80)),
    _t("kitchen", "Home & Kitchen › Kitchen & Dining › Cutlery", "Kitchen Knife Set", "knife set", "knife set",
       "stainless steel, wooden block, ultra sharp, full tang, ergonomic handle, dishwasher safe, rust resistant, "
       "german steel",
       [("style", "6 piece, 14 piece, 15 piece"), ("color", "black, silver")],
       (25, 180)),
    _t("kitchen", "Home & Kitchen › Kitchen & Dining › Water Bottles", "Insulated Water Bottle", "water bottle",
       "water bottle",
       "vacuum insulated, leak proof, bpa free, keeps drinks cold, stainless steel, wide mouth, straw lid, "
       "dishwasher safe",
       [("size", "18 oz, 32 oz, 40 oz"), ("color", "black, white, teal, lilac, pink")],
       (12, 45)),
    _t("kitchen", "Home & Kitchen › Kitchen & Dining › Small Appliances", "Countertop Blender",
       "countertop blender", "blender",
       "high speed motor, bpa free, dishwasher safe, ice crushing, variable speed, large capacity, easy to clean, "
       "pulse function",
       [("color", "black, silver, red"), ("style", "standard, with travel cups")],
       (30, 200)),
    _t("kitchen", "Home & Kitchen › Kitchen & Dining › Food Storage", "Glass Food Storage Containers",
       "food storage containers", "food storage containers",
       "airtight lids, microwave safe, bpa free, oven safe, freezer safe, leak proof, meal prep, stackable design",
       [("size", "10 pack, 18 pack, 24 pack"), ("color", "blue, grey, green")],
       (18, 60)),
    # -- sports -----------------------------------------------------------------------------------
    _t("sports", "Sports & Outdoors › Exercise & Fitness › Yoga Mats", "Yoga Mat", "yoga mat", "yoga mat",
       "non slip, extra thick, eco friendly, carrying strap, lightweight design, tear resistant, easy to clean, "
       "home workout",
       [("color", "purple, black, blue, pink, teal"), ("size", "4mm, 6mm, 10mm")],
       (15, 70)),
    _t("sports", "Sports & Outdoors › Exercise & Fitness › Dumbbells", "Adjustable Dumbbells",
       "adjustable dumbbells", "dumbbells",
       "adjustable weight, anti slip handle, space saving, home gym, quick change, rubber coated, sturdy build, "
       "compact storage",
       [("size", "25 lb, 52.5 lb, 90 lb")],
       (50, 400)),
    _t("sports", "Sports & Outdoors › Outdoor Recreation › Tents", "Camping Tent", "camping tent", "camping tent",
       "waterproof, easy setup, rain fly, mesh windows, carry bag, family size, windproof, lightweight design",
       [("size", "2 person, 4 person, 6 person"), ("color", "green, blue, orange, grey")],
       (40, 250)),
    _t("sports", "Sports & Outdoors › Cycling › Helmets", "Bike Helmet", "bike helmet", "bike helmet",
       "adjustable fit, lightweight design, removable visor, led light, breathable vents, impact resistant, "
       "magnetic buckle, adult size",
       [("color", "black, white, red, blue"), ("size", "medium, large")],
       (20, 90)),
    _t("sports", "Sports & Outdoors › Outdoor Recreation › Backpacks", "Hiking Backpack", "hiking backpack",
       "backpack",
       "water resistant, lightweight design, multiple compartments, padded shoulder straps, rain cover, "
       "laptop sleeve, hydration compatible, large capacity",
       [("color", "black, army green, grey, navy"), ("size", "40l, 50l, 65l")],
       (25, 140)),
    # -- toys -------------------------------------------------------------------------------------
    _t("toys", "Toys & Games › Building Toys › Building Sets", "Building Blocks Set", "building blocks",
       "blocks set",
       "educational toy, bpa free, storage box, creative play, stem learning, non toxic, easy to clean, "
       "gift for kids",
       [("size", "500 pieces, 1000 pieces, 1500 pieces")],
       (15, 90)),
    _t("toys", "Toys & Games › Puzzles › Jigsaw Puzzles", "Jigsaw Puzzle", "jigsaw puzzle", "jigsaw puzzle",
       "thick pieces, perfect fit, landscape art, family activity, poster included, anti glare, recycled material, "
       "gift for adults",
       [("size", "300 pieces, 500 pieces, 1000 pieces")],
       (10, 35)),
    _t("toys", "Toys & Games › Stuffed Animals › Plush Toys", "Stuffed Animal Plush Toy", "stuffed animal",
       "animal plush toy",
       "super soft, machine washable, gift for kids, huggable size, safety eyes, cute design, hypoallergenic filling, "
       "premium plush",
       [("color", "brown, white, pink, grey"), ("size", "12 inch, 18 inch, 24 inch")],
       (10, 45)),
    _t("toys", "Toys & Games › Remote Control Toys › Cars", "Remote Control Car", "remote control car",
       "remote control car",
       "high speed, all terrain, rechargeable battery, 2.4ghz remote, led lights, shockproof, off road, gift for kids",
       [("color", "red, blue, green, yellow")],
       (25, 120)),
    _t("toys", "Toys & Games › Games › Board Games", "Family Board Game", "board game", "board game",
       "family game night, quick to learn, strategy game, party game, travel size, educational toy, "
       "cooperative play, replay value",
       [("style", "standard edition, deluxe edition")],
       (15, 60)),
    # -- pets -------------------------------------------------------------------------------------
    _t("pets", "Pet Supplies › Dogs › Beds", "Orthopedic Dog Bed", "dog bed", "dog bed",
       "memory foam, machine washable, removable cover, non slip bottom, waterproof liner, bolster design, "
       "calming design, large dogs",
       [("size", "small, medium, large, x-large"), ("color", "grey, brown, navy blue, beige")],
       (25, 150)),
    _t("pets", "Pet Supplies › Cats › Cat Trees", "Cat Tree Tower", "cat tree", "cat tree tower",
       "sisal scratching posts, cozy condo, plush perch, stable base, multi level, dangling toys, easy assembly, "
       "indoor cats",
       [("color", "beige, grey, dark grey"), ("size", "34 inch, 54 inch, 72 inch")],
       (30, 160)),
    _t("pets", "Pet Supplies › Dogs › Food", "Dry Dog Food", "dry dog food", "dog food",
       "grain free, real chicken, high protein, no artificial flavors, adult dogs, small breed, "
       "natural ingredients, omega 3",
       [("flavor name", "chicken and rice, salmon, lamb, beef"), ("size", "4 pound, 15 pound, 30 pound")],
       (15, 90)),
    _t("pets", "Pet Supplies › Dogs › Leashes", "Dog Leash", "dog leash", "dog leash",
       "reflective threads, padded handle, heavy duty, tangle free, nylon rope, swivel clip, training leash, "
       "large dogs",
       [("color", "black, red, blue, pink, orange"), ("size", "4 ft, 6 ft")],
       (8, 30)),
    # -- garden -----------------------------------------------------------------------------------
    _t("garden", "Patio, Lawn & Garden › Outdoor Lighting › Pathway Lights", "Solar Pathway Lights",
       "solar pathway lights", "pathway lights",
       "waterproof, auto on off, easy installation, long lasting, stainless steel, garden decor, bright led, "
       "solar powered",
       [("size", "6 pack, 8 pack, 12 pack"), ("color", "warm white, cool white, multicolor")],
       (15, 60)),
    _t("garden", "Patio, Lawn & Garden › Gardening & Lawn Care › Hoses", "Expandable Garden Hose", "garden hose",
       "garden hose",
       "leak proof, kink free, lightweight design, brass fittings, spray nozzle, expandable design, heavy duty, "
       "easy storage",
       [("size", "25 ft, 50 ft, 100 ft"), ("color", "green, blue, black")],
       (18, 70)),
    _t("garden", "Patio, Lawn & Garden › Gardening & Lawn Care › Pots & Planters", "Ceramic Planter Pots",
       "planter pots", "planter pots",
       "drainage hole, indoor plants, modern design, saucer included, glazed finish, set of 3, outdoor use, "
       "succulent plants",
       [("size", "4 inch, 6 inch, 8 inch"), ("color", "white, black, terracotta, sage green")],
       (15, 60)),
    _t("garden", "Patio, Lawn & Garden › Birding & Wildlife › Bird Feeders", "Hanging Bird Feeder", "bird feeder",
       "bird feeder",
       "squirrel proof, weather resistant, easy to fill, large capacity, metal roof, hanging hook, easy to clean, "
       "wild birds",
       [("color", "green, black, copper, red")],
       (12, 55)),
)

CATEGORIES: tuple[str, ...] = tuple(sorted({t.category for t in PRODUCT_TYPES}))

# Every product-type noun the generated catalog knows (the noun stand-in's vocabulary).
CATALOG_NOUNS: frozenset[str] = frozenset(n for t in PRODUCT_TYPES for n in t.nouns)

BRANDS: tuple[str, ...] = (
    "Acorva", "Bellmont", "Brisa", "Calder", "Corvix", "Dunmore", "Elvora", "Fennick", "Galeon", "Halvard",
    "Ivory Lane", "Juniper Co", "Kestrel", "Lumora", "Marlowe", "Nordhaven", "Oakridge", "Pellham", "Quillon",
    "Rivella", "Sablewood", "Tamsin", "Umbria", "Valtrex Home", "Wrenfield", "Xandor", "Yarrow", "Zephyrine",
    "Alderby", "Brookvale", "Cindral", "Delmora", "Everhart", "Foxglen", "Greyhaven", "Hollis", "Ironbark",
    "Larkspur", "Moorfield", "Novalee",
)

# Sentences that make up bullet points and descriptions ("{a}" = an attribute, "{t}" = the product type).
FEATURE_TEMPLATES: tuple[str, ...] = (
    "{A}: designed for everyday use and made to last.",
    "{A} - tested for quality before it leaves our warehouse.",
    "{A}, so you can rely on it day after day.",
    "Features {a} for extra comfort and convenience.",
    "{A}; a thoughtful detail that sets this {t} apart.",
)
GENERIC_FEATURES: tuple[str, ...] = (
    "Satisfaction guaranteed: contact us with any question and we will help within 24 hours.",
    "Makes a great gift for birthdays, holidays and special occasions.",
    "Carefully packaged to arrive in perfect condition.",
    "Backed by a one year manufacturer warranty.",
    "Simple to use right out of the box.",
)
DESCRIPTION_OPENERS: tuple[str, ...] = (
    "Meet the {b} {t}, made for people who care about the details.",
    "The {b} {t} combines thoughtful design with reliable everyday performance.",
    "Upgrade your routine with this {t} from {b}.",
    "Looking for a dependable {t}? {b} has you covered.",
)
DESCRIPTION_CLOSERS: tuple[str, ...] = (
    "Order today and see the difference for yourself.",
    "Every piece is inspected to meet our quality standards.",
    "Thousands of happy customers already enjoy it.",
    "A smart choice for yourself or as a gift.",
)
REVIEW_TITLES: tuple[tuple[int, str], ...] = (
    (5, "Exactly what I wanted"), (5, "Love it"), (4, "Good value"), (4, "Works well"),
    (3, "Decent but not perfect"), (2, "Not as described"), (5, "Highly recommend"), (4, "Pretty good"),
)
REVIEW_BODIES: tuple[str, ...] = (
    "I have been using this {t} for a few weeks now and it holds up nicely.",
    "Arrived quickly and matches the pictures. Would buy again.",
    "The quality is better than I expected for the price.",
    "It does the job, although the packaging could be better.",
    "My family uses it every day and we have had no problems.",
    "Not bad overall, but it took a while to get used to.",
)
INSTRUCTION_OPENERS: tuple[str, ...] = ("i need", "i am looking for", "i want", "find me", "i'm looking for")
