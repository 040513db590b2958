"""WebShop env: BM25 search latency on a 10,000-product catalog, and the scripted expert's score.

    python -m benchmarks.webshop_search [--products 10000] [--queries 1000] [--expert-goals 200]

Builds the generated catalog (``catalog_seed`` 0) with ``--products`` products, times the index build,
then times ``SearchIndex.search`` (top 50, no result cache) on two query sets taken from the catalog's
goals: the expert's key-word queries and the full instruction texts (what an LLM agent often types).
Then runs the expert (``env.expert_actions()``) on the first ``--expert-goals`` train and test goals of
the default env (1,000 products) and of the large catalog. Writes
``benchmarks/results/webshop_search.{json,md}`` with machine info.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import bm25s


from benchmarks.machine import machine_info
from creditflow.envs import make
from creditflow.envs.webshop.catalog import generated_catalog, search_document
from creditflow.envs.webshop.expert import search_query
from creditflow.envs.webshop.search import B, K1, SEARCH_RETURN_N, SearchIndex


def latency_ms(index: SearchIndex, queries: list[str]) -> dict:
    for q in queries[:20]:  # warm-up
        index.search(q)
    times = []
    for q in queries:
        t0 = time.perf_counter_ns()
        index.search(q)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    times.sort()
    return {"queries": len(times), "median_ms": statistics.median(times),
            "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))], "mean_ms": statistics.fmean(times),
            "max_ms": times[-1]}


def expert_scores(num_products: int, split: str, n: int) -> dict:
    env = make("webshop", split=split, num_products=num_products)
    scores, steps = [], []
    for seed in range(min(n, len(env))):
        env.reset(seed=seed)
        plan = env.expert_actions()
        for action in plan:
            *_, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        scores.append(info["score"])
        steps.append(len(plan))
    return {"products": num_products, "split": split, "goals": len(scores), "mean_score": statistics.fmean(scores),
            "success_rate": sum(s == 1.0 for s in scores) / len(scores), "mean_steps": statistics.fmean(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--products", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--expert-goals", type=int, default=200)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "webshop_search"))
    args = ap.parse_args()

    t0 = time.perf_counter()
    catalog = generated_catalog(0, args.products)
    catalog_s = time.perf_counter() - t0
    documents = [search_document(p) for p in catalog.products]
    t0 = time.perf_counter()
    index = SearchIndex(documents)
    build_s = time.perf_counter() - t0
    goals = (catalog.goals["train"] + catalog.goals["test"])[: args.queries]
    keyword_queries = [search_query(g["instruction_text"]) for g in goals]
    instruction_queries = [g["instruction_text"] for g in goals]
    hits = [len(index.search(q)) for q in keyword_queries]

    result = {
        "benchmark": "webshop_search",
        "settings": {"products": args.products, "catalog_seed": 0, "engine": f"bm25s {bm25s.__version__}",
                     "bm25": f"lucene variant, k1={K1}, b={B}", "top_k": SEARCH_RETURN_N,
                     "fields": "title + description + attributes"},
        "catalog_build_s": catalog_s,
        "index_build_s": build_s,
        "mean_results_per_keyword_query": statistics.fmean(hits),
        "latency_keyword_queries": latency_ms(index, keyword_queries),
        "latency_instruction_queries": latency_ms(index, instruction_queries),
        "expert": [expert_scores(n, split, args.expert_goals)
                   for n in (1000, args.products) for split in ("train", "test")],
        "machine": machine_info(),
        "load_average_at_end": list(os.getloadavg()),  # whether other jobs shared the cores
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    m = result["machine"]
    md = [
        "# WebShop env: search latency and expert score", "",
        f"Machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, {m['date']}; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in result['load_average_at_end'])} (above ~1: other jobs shared the cores). "
        f"Engine: {result['settings']['engine']}, {result['settings']['bm25']}, top {SEARCH_RETURN_N}, over "
        f"{result['settings']['fields']}.", "",
        f"Catalog of {args.products:,} products: generated in {catalog_s:.2f} s (index included); "
        f"index alone built in {build_s:.2f} s.", "",
        "| queries | n | median ms | p95 ms | mean ms | max ms |", "|---|---|---|---|---|---|",
    ]
    for name, key in (("expert key words", "latency_keyword_queries"),
                      ("full instruction text", "latency_instruction_queries")):
        r = result[key]
        md.append(f"| {name} | {r['queries']} | {r['median_ms']:.3f} | {r['p95_ms']:.3f} | {r['mean_ms']:.3f} | "
                  f"{r['max_ms']:.3f} |")
    md += ["", "Scripted expert (`env.expert_actions()`), first goals of each split:", "",
           "| products | split | goals | mean score | success (score = 1) | mean steps |", "|---|---|---|---|---|---|"]
    for r in result["expert"]:
        md.append(f"| {r['products']:,} | {r['split']} | {r['goals']} | {r['mean_score']:.3f} | "
                  f"{r['success_rate']:.3f} | {r['mean_steps']:.2f} |")
    md.append("")
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
