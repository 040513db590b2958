"""Recipes: the composition root. Each module wires the layers below into one run (``train``, ``sft``,
``eval``, ``demo``, ``rro``) and writes its run directory; nothing in the package imports this layer
except the CLI."""
