"""Draw one group's state graph like RewardFlow's Fig. 8-10, with a node/edge legend like Figs. 11-12.

Node shade = R(s) (darker green = closer to success, grey = no observed path to success), edge colour
= r~ of the transition (red > 0, blue < 0, grey = 0, App. D.5; the lightest shade of either colour is
still clearly tinted, so small rewards stay visible), success terminals drawn as double circles labelled
``N*``, start states with a thick outline. Layers run left to right by hop count from the start states.

Formats by suffix: ``.png`` / ``.svg`` / ``.pdf`` (matplotlib; the two colour bars side by side under the
graph, the legend under them),
``.dot`` (Graphviz text; legend in comments, full texts as tooltips), ``.html`` (self-contained: inline
SVG plus node and edge tables with the full state texts).
"""

from __future__ import annotations

import html
import io
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib
import networkx as nx
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LinearSegmentedColormap, Normalize
from matplotlib.figure import Figure

from creditflow.atomic import atomic_open
from creditflow.credit.registry import Knobs, estimator_drawing, graph_estimators
from creditflow.credit.states import display_text
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Trajectory

FORMATS = (".png", ".svg", ".pdf", ".dot", ".html")


class GraphError(UserError):
    """Unknown group, unsupported output format."""


@dataclass
class GroupGraph:
    group_id: str
    labels: list[str]  # "0", "1", ..., "7*" (success)
    texts: list[str]  # full state text per node
    reward: np.ndarray  # R(s) per node
    dist: np.ndarray  # hop distance (or mean distance) per node
    success: np.ndarray  # bool per node
    start: np.ndarray  # bool per node
    edges: list[tuple[int, int, list[str], float, int]]  # (src, dst, actions, r~, times observed)
    layer: np.ndarray  # BFS depth from the start states
    rollouts: int
    successes: int
    estimator: str  # whose graph: the title its estimator declares (``registry.Drawing``)


def group_graph(trajectories: Sequence[Trajectory], group_id: str | None = None, knobs: Knobs | None = None,
                estimator: str | None = None) -> GroupGraph:
    """The state graph of one group (default: the first), numbered like Figs. 11-12. ``estimator``: whose graph,
    one that declares a :class:`~creditflow.credit.registry.Drawing` (default: the first registered,
    :func:`~creditflow.credit.registry.graph_estimators`); ``knobs``: its graph knobs (default: their defaults)."""
    drawn = graph_estimators()
    estimator = drawn[0] if estimator is None else estimator
    drawing = estimator_drawing(estimator)
    if drawing is None:
        raise GraphError(f"estimator {estimator!r} draws no graph; graphs are drawn for {', '.join(drawn)}")
    trajs = list(trajectories)
    if not trajs:
        raise GraphError("no trajectories in the input")
    ids = list(dict.fromkeys(t.group_id for t in trajs))
    gid = ids[0] if group_id is None else group_id
    if gid not in ids:
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        raise GraphError(f"no group {gid!r} in the input; groups: {shown}")
    group = [t for t in trajs if t.group_id == gid]
    g = drawing.nodes(group, knobs)

    # number nodes in order of first appearance along the rollouts (start state of rollout 0 is 0)
    order: dict[int, int] = {}
    sequence = []
    for i in range(g.src.size):
        sequence.extend((int(g.src[i]), int(g.dst[i])) if g.kept[i] else (int(g.src[i]),))
    sequence.extend(g.success_nodes.tolist())
    for node in sequence:
        if g.in_graph[node] and node not in order:
            order[node] = len(order)
    nodes = list(order)
    n = len(nodes)
    success = np.isin(nodes, g.success_nodes)
    start = np.isin(nodes, g.start_nodes)
    labels = [f"{k}*" if success[k] else str(k) for k in range(n)]
    texts = [display_text(g.keys[node], g.display) for node in nodes]

    actions: dict[tuple[int, int], list[str]] = {}
    counts: dict[tuple[int, int], int] = {}
    step_actions = [s.action for t in group for s in t.steps]
    for i in np.flatnonzero(g.kept).tolist():
        key = (order[int(g.src[i])], order[int(g.dst[i])])
        acts = actions.setdefault(key, [])
        act = step_actions[i].strip()
        if act not in acts:
            acts.append(act)
        counts[key] = counts.get(key, 0) + 1
    reward = g.value[nodes]
    edges = [(u, v, acts, float(reward[v] - reward[u]), counts[(u, v)]) for (u, v), acts in sorted(actions.items())]

    layer = np.full(n, -1, dtype=np.int64)
    succ: dict[int, list[int]] = {}
    for u, v, *_ in edges:
        succ.setdefault(u, []).append(v)
    queue = deque(int(k) for k in np.flatnonzero(start))
    layer[start] = 0
    while queue:
        u = queue.popleft()
        for v in succ.get(u, []):
            if layer[v] < 0:
                layer[v] = layer[u] + 1
                queue.append(v)
    layer[layer < 0] = layer.max() + 1 if n else 0
    return GroupGraph(gid, labels, texts, reward, g.dist[nodes], success, start, edges, layer, len(group),
                      g.successes, drawing.title)


def legend_lines(graph: GroupGraph, width: int | None = None) -> list[str]:
    """Text legend: "Node k: <state>" then "Node u -> Node v: action" (Figs. 11-12)."""
    lines = ["Node list:"]
    for label, text, r in zip(graph.labels, graph.texts, graph.reward):
        flat = " | ".join(part.strip() for part in text.splitlines() if part.strip())
        line = f"Node {label} (R={r:.3f}): {flat}"
        lines.append(line if width is None or len(line) <= width else line[: width - 3] + "...")
    lines.append("Edge list:")
    for u, v, acts, dr, count in graph.edges:
        lines.append(f"Node {graph.labels[u]} -> Node {graph.labels[v]}: {' / '.join(acts)}"
                     f"  (r~={dr:+.3f}, seen {count}x)")
    return lines


# --------------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------------


def write_graph(graph: GroupGraph, out: str | os.PathLike) -> Path:
    """Write ``graph`` to ``out`` (format from the suffix), atomically."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise GraphError(f"unsupported output {out.name!r}: use one of {', '.join(FORMATS)}")
    if suffix == ".dot":
        data = to_dot(graph).encode("utf-8")
    elif suffix == ".html":
        data = to_html(graph).encode("utf-8")
    else:
        data = _figure_bytes(graph, suffix[1:], with_legend=True)
    with atomic_open(out, "wb") as fh:
        fh.write(data)
    return out


EDGE_FLOOR = 0.4  # the lightest shade an edge with r~ != 0 gets: a pale tint would vanish on white
ZERO_EDGE = (0.62, 0.62, 0.62, 1.0)


def _edge_cmap() -> LinearSegmentedColormap:
    """Diverging blue (r~ < 0) / red (r~ > 0) map that never reaches white: |r~| -> shade in
    [EDGE_FLOOR, 1] of Blues / Reds; r~ = 0 is drawn grey (``ZERO_EDGE``)."""
    blues, reds = matplotlib.colormaps["Blues"], matplotlib.colormaps["Reds"]
    shades = np.linspace(1.0, EDGE_FLOOR, 64)
    colors = [blues(x) for x in shades] + [reds(x) for x in shades[::-1]]
    return LinearSegmentedColormap.from_list("creditflow_edge", colors, N=256)


def _colors(graph: GroupGraph):
    node_cmap = matplotlib.colormaps["Greens"]
    edge_cmap = _edge_cmap()
    emax = max([abs(e[3]) for e in graph.edges] + [1e-9])
    node_rgba = [node_cmap(0.15 + 0.85 * r) if r > 0 else (0.82, 0.82, 0.82, 1.0) for r in graph.reward]
    edge_rgba = [edge_cmap(0.5 + 0.5 * e[3] / emax) if abs(e[3]) > 1e-12 else ZERO_EDGE for e in graph.edges]
    return node_rgba, edge_rgba, emax


def _hex(rgba) -> str:
    return "#" + "".join(f"{int(round(c * 255)):02x}" for c in rgba[:3])


def _positions(graph: GroupGraph) -> dict[int, tuple[float, float]]:
    pos = {}
    for depth in np.unique(graph.layer).tolist():
        members = np.flatnonzero(graph.layer == depth).tolist()
        for j, node in enumerate(members):
            pos[node] = (float(depth), (len(members) - 1) / 2.0 - j)
    return pos


def _figure_bytes(graph: GroupGraph, fmt: str, with_legend: bool) -> bytes:
    """The figure, laid out in inches from the top: title, graph, a row with the two colour bars side by
    side (each with its own ticks and label), then the text legend. Saved with a tight bounding box, so no
    label is cut whatever the graph's size."""
    n = len(graph.labels)
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(n))
    for u, v, *_ in graph.edges:
        g.add_edge(u, v)
    pos = _positions(graph)
    node_rgba, edge_rgba, emax = _colors(graph)
    depth = int(graph.layer.max()) + 1 if n else 1
    height_nodes = max(int(np.bincount(graph.layer).max()) if n else 1, 2)
    width = min(max(7.0, 1.3 * depth + 2), 40.0)
    graph_h = min(max(3.0, 0.9 * height_nodes + 1.0), 30.0)
    legend = legend_lines(graph, width=int(width * 14)) if with_legend else []
    legend_shown = legend[:120] + (["... (full legend: write .html or .dot)"] if len(legend) > 120 else [])
    title_h, bars_h = 0.45, 0.85
    legend_h = 0.125 * len(legend_shown) + (0.3 if legend_shown else 0.0)
    total = title_h + graph_h + bars_h + legend_h
    fig = Figure(figsize=(width, total))

    def box(left: float, top: float, box_w: float, box_h: float) -> tuple[float, float, float, float]:
        """Axes rectangle in figure fractions from a box in inches measured from the top-left corner."""
        return (left / width, 1 - (top + box_h) / total, box_w / width, box_h / total)

    ax = fig.add_axes(box(0.2, title_h, width - 0.4, graph_h))
    ax.set_axis_off()
    sizes = [700 if s else 450 for s in graph.success]
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=node_rgba, node_size=sizes,
                           edgecolors=["black" if (st or sc) else "#555555" for st, sc in zip(graph.start, graph.success)],
                           linewidths=[2.5 if (st or sc) else 0.8 for st, sc in zip(graph.start, graph.success)])
    if graph.success.any():
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=np.flatnonzero(graph.success).tolist(), node_size=1100,
                               node_color="none", edgecolors="black", linewidths=1.2)
    for k, label in enumerate(graph.labels):
        nx.draw_networkx_labels(g, pos, ax=ax, labels={k: label}, font_size=8,
                                font_color="white" if graph.reward[k] > 0.6 else "black")
    pairs = {(u, v) for u, v, *_ in graph.edges}
    for (u, v, acts, dr, count), color in zip(graph.edges, edge_rgba):
        style = f"arc3,rad={0.25 if (v, u) in pairs else 0.0}"
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=[(u, v)], edge_color=[color], width=1.3 + 0.4 * min(count, 5),
                               arrows=True, arrowsize=12, node_size=600, connectionstyle=style)
        if len(graph.edges) <= 40:
            nx.draw_networkx_edge_labels(g, pos, ax=ax, edge_labels={(u, v, 0): " / ".join(acts)[:24]}, font_size=6,
                                         rotate=False, connectionstyle=style,
                                         bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.margins(0.08)
    fig.text(0.5, 1 - 0.25 / total, f"state graph of group {graph.group_id}: {n} nodes, {len(graph.edges)} edges, "
             f"{graph.rollouts} rollouts ({graph.successes} successful)", ha="center", va="center", fontsize=9)
    bar_w = min(3.2, (width - 1.6) / 2)
    bar_top = title_h + graph_h + 0.15
    for k, (mappable, label) in enumerate((
            (ScalarMappable(Normalize(0, 1), matplotlib.colormaps["Greens"]), "node reward $R(s)$ (grey: 0, no path to success)"),
            (ScalarMappable(Normalize(-emax, emax), _edge_cmap()), r"edge reward $\tilde r = R(s') - R(s)$ (grey: 0)"))):
        center = width * (0.25 + 0.5 * k)
        cax = fig.add_axes(box(center - bar_w / 2, bar_top, bar_w, 0.16))
        bar = fig.colorbar(mappable, cax=cax, orientation="horizontal")
        lo, hi = mappable.norm.vmin, mappable.norm.vmax
        bar.set_ticks(np.linspace(lo, hi, 5), labels=[f"{x:.2g}" for x in np.linspace(lo, hi, 5)])
        bar.ax.tick_params(labelsize=7)
        bar.set_label(label, fontsize=8)
    if legend_shown:
        fig.text(0.2 / width, 1 - (title_h + graph_h + bars_h) / total, "\n".join(legend_shown), va="top",
                 ha="left", family="monospace", fontsize=6.5)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=130, bbox_inches="tight", pad_inches=0.15)
    return buf.getvalue()


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_dot(graph: GroupGraph) -> str:
    node_rgba, edge_rgba, _ = _colors(graph)
    lines = [f"// {graph.estimator} state graph of group {graph.group_id}: {len(graph.labels)} nodes, "
             f"{len(graph.edges)} edges, {graph.rollouts} rollouts ({graph.successes} successful)",
             "// node fill = R(s) (darker green = closer to success, grey = unreachable); "
             "edge colour = r~ (red > 0, blue < 0, grey = 0); doublecircle = success terminal; bold = start"]
    lines += [f"// {line}" for line in legend_lines(graph)]
    lines += ["digraph state_graph {", "  rankdir=LR;", '  node [style=filled, fontsize=10];']
    for k, (label, text) in enumerate(zip(graph.labels, graph.texts)):
        shape = "doublecircle" if graph.success[k] else "circle"
        pen = ", penwidth=2.5" if graph.start[k] else ""
        lines.append(f'  n{k} [label="{_dot_escape(label)}", shape={shape}, fillcolor="{_hex(node_rgba[k])}", '
                     f'tooltip="{_dot_escape(text)} (R={graph.reward[k]:.3f})"{pen}];')
    for (u, v, acts, dr, count), color in zip(graph.edges, edge_rgba):
        lines.append(f'  n{u} -> n{v} [label="{_dot_escape(" / ".join(acts))}", color="{_hex(color)}", '
                     f'tooltip="r~={dr:+.3f}, seen {count}x"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_html(graph: GroupGraph) -> str:
    svg = _figure_bytes(graph, "svg", with_legend=False).decode("utf-8")
    svg = svg[svg.find("<svg"):]
    esc = html.escape
    rows = []
    for k, (label, text) in enumerate(zip(graph.labels, graph.texts)):
        d = graph.dist[k]
        dist = "-" if not np.isfinite(d) or d < 0 else f"{d:g}"
        flags = ", ".join(f for f, on in (("start", graph.start[k]), ("success", graph.success[k])) if on)
        rows.append(f"<tr><td>Node {esc(label)}</td><td>{graph.reward[k]:.4f}</td><td>{dist}</td>"
                    f"<td>{flags}</td><td><pre>{esc(text)}</pre></td></tr>")
    erows = [f"<tr><td>Node {esc(graph.labels[u])} &rarr; Node {esc(graph.labels[v])}</td>"
             f"<td>{esc(' / '.join(a))}</td><td>{dr:+.4f}</td><td>{c}</td></tr>"
             for u, v, a, dr, c in graph.edges]
    title = f"{graph.estimator} state graph: group {esc(graph.group_id)}"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;margin-bottom:2em}}
td,th{{border:1px solid #ccc;padding:3px 8px;vertical-align:top;font-size:13px}}
pre{{margin:0;white-space:pre-wrap;font-size:12px}}</style></head>
<body><h2>{title}</h2>
<p>{len(graph.labels)} nodes, {len(graph.edges)} edges, {graph.rollouts} rollouts ({graph.successes} successful).
Node shade = R(s) = &gamma;<sup>d(s)</sup> (grey: no observed path to success); edge colour = r&#771; = R(s')-R(s)
(red &gt; 0, blue &lt; 0, grey = 0); double circle = success terminal (N*); thick outline = start state.</p>
{svg}
<h3>Nodes</h3><table><tr><th>node</th><th>R(s)</th><th>d(s)</th><th></th><th>state</th></tr>
{''.join(rows)}</table>
<h3>Edges</h3><table><tr><th>edge</th><th>action(s)</th><th>r&#771;</th><th>seen</th></tr>
{''.join(erows)}</table>
</body></html>
"""
