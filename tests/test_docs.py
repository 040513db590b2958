"""The documentation site's build pieces (mkdocs.yml, docs/hooks.py, docs/griffe_roles.py).

`make test` builds the site with `mkdocs build --strict` (a broken link, anchor or API reference fails); these
tests pin what the hooks do to the pages on the way, without a build.
"""

import importlib.util
import re
from pathlib import Path

import griffe
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load("hooks")
roles = _load("griffe_roles")


def test_make_test_builds_the_site_strictly_before_the_tests():
    """--strict fails the build on any warning; -q/--quiet would hide the warnings and with them the failure."""
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)[1].splitlines()
    build = [line for line in recipe if "$(MKDOCS) build" in line]
    assert build == ["\t$(MKDOCS) build --strict"]
    assert recipe.index(build[0]) < min(i for i, line in enumerate(recipe) if "pytest" in line)
    assert re.search(r"^MKDOCS := .*\$\(VENV\)/bin/mkdocs$", (ROOT / "Makefile").read_text(), re.M)


def test_the_site_fetches_nothing_and_validates_every_link():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # BaseLoader: !!python tags
    assert config["theme"]["font"] == "false"  # no Google Fonts
    assert {"social", "privacy", "optimize"}.isdisjoint(
        name if isinstance(name, str) else next(iter(name)) for name in config["plugins"])
    assert set(config["validation"].values()) == {"warn"}  # each a failure under --strict


def test_a_link_to_a_checks_record_goes_to_its_results_page():
    page = "[the record](../benchmarks/results/credit_learning_hard.md)"
    assert hooks.outside_links(page, "trl.md") == "[the record](results/credit-learning-hard.md)"
    assert hooks.outside_links(page.replace("../", "../../"), "reference/x.md") == \
        "[the record](../results/credit-learning-hard.md)"
    figure = "![curve](../benchmarks/results/credit_learning.png)"
    assert hooks.outside_links(figure, "verl.md") == "![curve](results/img/credit_learning.png)"


def test_other_links_out_of_docs_become_code_paths_and_the_rest_is_untouched():
    text = ("see [config.py](../creditflow/config.py), [the overhead](../benchmarks/results/trl_credit_overhead.md), "
            "[verl](verl.md#scaling), [web](https://example.org/a.md) and [top](#top)")
    assert hooks.outside_links(text, "trl.md") == (
        "see `creditflow/config.py`, the overhead (`benchmarks/results/trl_credit_overhead.md`), "
        "[verl](verl.md#scaling), [web](https://example.org/a.md) and [top](#top)")
    fenced = "```md\n[x](../README.md)\n```\n"
    assert hooks.outside_links(fenced, "index.md") == fenced


def test_lists_read_as_on_github():
    text = "Text:\n- a\n  continued\n  - nested\n    more\n- b\n\nAfter.\n0. not a list\n"
    assert hooks.github_lists(text) == (
        "Text:\n\n- a\n    continued\n    - nested\n        more\n- b\n\nAfter.\n0. not a list\n")
    four = "- a\n    - nested by four\n"
    assert hooks.github_lists(four) == four
    assert hooks._outside_code("r̃_t and `r̃_t`", hooks._literal_underscores) == "r̃\\_t and `r̃_t`"


def test_the_results_section_lists_every_results_page_table_order_first():
    pages = hooks.results_pages()
    on_disk = {f"results/{p.name}" for p in (ROOT / "docs" / "results").glob("*.md")}
    assert pages[0] == "results/index.md" and set(pages) == on_disk and len(pages) == len(on_disk)
    # in the order of first appearance (a credit audit's page has a row per behaviour policy)
    linked = list(dict.fromkeys(re.findall(r"^\| \[[^\]]+\]\(([\w.-]+\.md)\)",
                                           (ROOT / "docs/results/index.md").read_text(), re.M)))
    assert pages[1:1 + len(linked)] == [f"results/{name}" for name in linked]
    nav = hooks._expand_results({"Results": "results/index.md"})
    assert nav["Results"][0] == {"Overview": "results/index.md"} and nav["Results"][1:] == pages[1:]


def test_cli_page_documents_every_command_with_its_options():
    import typer.main

    from creditflow.cli import app

    page = hooks.cli_page()
    paths = [" ".join(path) for path, _, _ in hooks._commands(typer.main.get_command(app), ["creditflow"], None)]
    assert "creditflow rro collect" in paths
    for path in paths[1:]:
        assert f"## `{path}`" in page and f"(#{path.replace(' ', '-')})" in page
    # click's "[default: ...]" after the help, the cell html-escaped
    assert "| `--episodes <int range>` | Held-out tasks (one episode each). [default: 64; x&gt;=1] |" in page
    # the knob lists of `credit --help`, one table per estimator
    assert "| `gamma` | `0.9` | Decay gamma of Eq. 3, R(s) = gamma ** d(s), in (0, 1]; Tab. 8: 0.90. |" in page
    assert "| `noop_feedback` | `'Nothing happens'` |" in page


def test_config_page_is_the_output_of_creditflow_config():
    from creditflow.config import build_config
    from creditflow.configdoc import commented_yaml

    assert commented_yaml(build_config(None, [])).rstrip("\n") in hooks.config_page()


def test_sphinx_roles_become_optional_cross_references():
    package = griffe.load("creditflow.credit", search_paths=[ROOT], resolve_aliases=False)
    text = roles.rewrite(":func:`compute` and :class:`~creditflow.credit.batch.StepBatch`; :func:`nowhere`",
                         package)
    assert text == (
        '<autoref identifier="creditflow.credit.api.compute" optional><code>compute</code></autoref> and '
        '<autoref identifier="creditflow.credit.batch.StepBatch" optional><code>StepBatch</code></autoref>; '
        "<code>nowhere</code>")
    assert roles.rewrite("a sequence::\n\n    code\n", package) == "a sequence:\n\n    code\n"
