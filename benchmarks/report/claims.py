"""What the results claim and which check tests it: the arms' names, the papers' claimed orderings, the numbers
quoted beside ours, and every check's :class:`Spec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NAMES = {"grpo": "GRPO", "gigpo": "GiGPO", "rewardflow": "RewardFlow", "rloo": "RLOO",
         "rewardflow_official": "RewardFlow (official preset)", "gigpo_official": "GiGPO (official preset)",
         "graphgpo": "GraphGPO", "graphgpo_reproduction": "GraphGPO (reproduction preset)", "g2po": "G2PO",
         "gagpo": "GAGPO",
         "grpo+expreplay": "GRPO + ExpReplay", "grpo+crps": "GRPO + CRPS", "rewardflow+crps": "RewardFlow + CRPS",
         "rising": "RRO + DPO", "fixed": "fixed-5 + DPO", "sft": "π_SFT", "rl": "RewardFlow (demo defaults)"}
CREDIT_CLAIM = [("rewardflow", "gigpo"), ("gigpo", "grpo"), ("rewardflow", "grpo")]
OFFICIAL_CLAIM = [("rewardflow_official", "gigpo_official"), ("gigpo_official", "grpo"), ("rewardflow_official", "grpo")]
# what the graph estimators' papers claim against the baselines they share with RewardFlow's (issues 72 and 84):
# GraphGPO (arXiv 2605.26684) over GiGPO and GRPO on Sokoban (its official preset; the reproduction preset's
# records of issue 72 are kept beside it), G2PO (arXiv 2606.22995) over GRPO, GAGPO (arXiv 2605.13217) over GiGPO
# and GRPO on ALFWorld and WebShop
GRAPH_CLAIMS = [("GraphGPO paper", [("graphgpo", "gigpo"), ("graphgpo", "grpo")]),
                ("GraphGPO paper, reproduction preset", [("graphgpo_reproduction", "gigpo"),
                                                         ("graphgpo_reproduction", "grpo")]),
                ("G2PO paper", [("g2po", "grpo")]),
                ("GAGPO paper", [("gagpo", "gigpo"), ("gagpo", "grpo")])]
CRPS_CLAIM = [("grpo+crps", "grpo+expreplay"), ("grpo+crps", "grpo")]
RRO_CLAIM = [("rising", "fixed"), ("rising", "sft")]
PAPER = {  # numbers the papers report, quoted beside ours (RRO paper, Table 1 and its text)
    "rro_samples_per_step_webshop": 1.86, "rro_samples_per_step_intercode_sql": 1.64, "fixed_samples_per_step": 5,
}
GOALS = {  # targets this project set itself (issues 12 and 35), quoted where a page says whether they are met
    "demo_gain": 0.10, "demo_minutes": 15, "rro_samples_ratio": 0.4,
}
CLAIMS = {  # the ordering each kind of check tests: (short, where it is stated)
    "credit": ("RewardFlow > GiGPO > GRPO", "the RewardFlow paper (Feng et al. 2026), Fig. 3 and its result tables"),
    "crps": ("+ CRPS > + ExpReplay, + CRPS > GRPO", "the CRPS paper, Table 1"),
    "rro": ("RRO > fixed-5, RRO > π_SFT", "the RRO paper (Wang et al. 2025), Table 1"),
    "demo": ("RL > π_SFT", "the demo's own goal, not a paper's claim"),
    "dpo": ("RRO + DPO > π_SFT", "the RRO paper, Table 1"),
}


@dataclass
class Spec:
    """What a check is: its summary, the claim it tests, how its runs are read."""

    stem: str
    kind: str  # learning | rro | demo | dpo
    title: str
    setting: str  # the README row's setting, short
    claim: str  # PAPERS key
    claims: list  # (above, below) pairs the claim asserts
    extra_claims: list = field(default_factory=list)  # [(label, pairs)]: the same claim for other arms (presets)
    borrow: dict = field(default_factory=dict)  # arm -> records dir of another check (the same π_SFT)
    diagnostics_file: str | None = None  # per-run diagnostics for records older than their ``diagnostics``
    status: str = ""  # e.g. what superseded it


SPECS = [
    Spec("credit_learning", "learning", "GRPO vs GiGPO vs RewardFlow, demo levels, 12 steps",
         "Sokoban 6×6, 1 box (demo levels); 12 steps of 8 × 4", "credit", CREDIT_CLAIM),
    Spec("credit_learning_demo100", "learning", "GRPO vs GiGPO vs RewardFlow, demo levels, 100 steps",
         "Sokoban 6×6, 1 box; 100 steps of 4 × 8", "credit", CREDIT_CLAIM, extra_claims=GRAPH_CLAIMS),
    Spec("credit_learning_hard", "learning", "GRPO vs GiGPO vs RewardFlow, 2 boxes on 7×7",
         "Sokoban 7×7, 2 boxes; 100 steps of 8 × 4", "credit", CREDIT_CLAIM,
         extra_claims=[("official preset", OFFICIAL_CLAIM), *GRAPH_CLAIMS],
         diagnostics_file="credit_learning_hard_diagnostics.json"),
    Spec("credit_learning_hard_binary", "learning", "GRPO and GiGPO on binary success, 2 boxes on 7×7",
         "as the 2-box check, GRPO and GiGPO on success", "credit", CREDIT_CLAIM,
         borrow={"rewardflow": "credit_learning_hard_runs"}),
    Spec("credit_learning_hard_h100", "learning", "GRPO vs GiGPO vs RewardFlow, 2 boxes on 7×7 (H100 lease, partial)",
         "Sokoban 7×7, 2 boxes; 100 steps of 8 × 4 (9 of 15 runs)", "credit", CREDIT_CLAIM,
         status="superseded by [the complete 2-box check](credit-learning-hard.md): its π_SFT was not kept"),
    Spec("credit_learning_household", "learning", "GRPO vs GiGPO vs RewardFlow, household (TextWorld)",
         "TextWorld pick-and-place, medium; 100 steps of 8 × 4", "credit", CREDIT_CLAIM),
    Spec("crps_learning", "learning", "GRPO vs + ExpReplay vs + CRPS, demo levels, 12 steps",
         "Sokoban 6×6, 1 box; 12 steps of 8 × 4", "crps", CRPS_CLAIM),
    Spec("crps_learning_hard", "learning", "GRPO vs + ExpReplay vs + CRPS, 2 boxes on 7×7, binary success",
         "Sokoban 7×7, 2 boxes, success reward; 100 steps of 8 × 4", "crps", CRPS_CLAIM),
    Spec("rro_samples", "rro", "RRO vs fixed-size exploration, Sokoban",
         "Sokoban 6×6, 1 box; 32 tasks a collection", "rro", RRO_CLAIM),
    Spec("rro_samples_webshop", "rro", "RRO vs fixed-size exploration, WebShop",
         "WebShop (generated catalog); 420 tasks a collection, DPO lr 1e-4", "rro", RRO_CLAIM),
    Spec("rro_samples_webshop_first_sft", "rro", "RRO vs fixed-size exploration, WebShop, first π_SFT",
         "as the WebShop check, the first π_SFT (weights lost)", "rro", RRO_CLAIM,
         status="superseded by [the 5-seed WebShop check](rro-samples-webshop.md): its π_SFT's weights were lost"),
    Spec("rro_dpo_settings_webshop", "dpo", "RRO on WebShop: the DPO learning rate",
         "WebShop, the 5-seed check's RRO collections; DPO lr and pair filter", "dpo", [("lr 5e-5", "sft")],
         extra_claims=[("valid chosen pairs", [("lr 5e-5, valid chosen", "sft")])]),
    Spec("demo_seeds", "demo", "creditflow demo: RewardFlow from π_SFT, 5 seeds",
         "Sokoban 6×6, 1 box; `creditflow demo` defaults (100 steps of 8 × 8)", "demo", [("rl", "sft")]),
    Spec("demo_seeds_test", "demo", "creditflow demo on the test split: RewardFlow from π_SFT",
         "as the demo row; evaluated on 512 test levels, never used for a choice", "demo", [("rl", "sft")]),
]
