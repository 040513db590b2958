"""Draw creditflow's package-level import graph (docs/import_graph.png) from the real imports (grimp).

    .venv/bin/python docs/import_graph.py

Nodes are the layers of docs/architecture.md, drawn bottom (floor) to top (cli); an arrow A -> B means
some module of A imports some module of B.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import networkx as nx
from matplotlib.figure import Figure

LAYERS = [  # low to high, as in pyproject's import-linter contract
    ["errors"], ["atomic"], ["jsonl"], ["config"], ["envs", "policy"], ["rollout"],
    ["credit", "curriculum", "pairs"], ["trainer"], ["recipes", "integrations"], ["api"], ["cli"],
]
# pyproject's ignore_imports (empty: no import goes up a layer)
IGNORED: set[tuple[str, str]] = set()
# x positions: staggered so that arrows between single-package layers do not run through nodes
X = {"errors": 0.0, "atomic": -1.0, "jsonl": 1.0, "config": 0.4, "envs": -1.2, "policy": 1.1, "rollout": -0.4,
     "credit": -1.5, "curriculum": 0.0, "pairs": 1.5, "trainer": 0.6, "recipes": -0.7, "integrations": 0.9,
     "api": 0.0, "cli": 0.3}


def package_edges() -> set[tuple[str, str]]:
    graph = grimp.build_graph("creditflow")
    names = {n for layer in LAYERS for n in layer}
    edges = set()
    for module in graph.modules:
        src = module.split(".")[1] if "." in module else None
        if src not in names:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            parts = imported.split(".")
            if parts[0] == "creditflow" and len(parts) > 1 and parts[1] in names and parts[1] != src:
                edges.add((src, parts[1]))
    return edges - IGNORED


def main(out: Path = Path(__file__).with_name("import_graph.png")) -> None:
    edges = package_edges()
    present = {n for e in edges for n in e}
    g = nx.DiGraph()
    pos = {}
    for y, layer in enumerate(LAYERS):
        nodes = [n for n in layer if n in present]
        for name in nodes:
            g.add_node(name)
            pos[name] = (X[name], y)
    g.add_edges_from(edges)
    fig = Figure(figsize=(7, 8))
    ax = fig.add_subplot()
    ax.set_axis_off()
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=2600, node_color="#dbe9f6", edgecolors="#3a6ea5")
    nx.draw_networkx_labels(g, pos, ax=ax, font_size=9)
    nx.draw_networkx_edges(g, pos, ax=ax, arrowsize=12, edge_color="#777777", node_size=2600,
                           connectionstyle="arc3,rad=0.08")
    ax.set_title("creditflow imports (arrow: importer -> imported); every arrow points down")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"{len(edges)} package edges -> {out}")


if __name__ == "__main__":
    main()
