"""Recipes: the composition root. Each module wires the layers below into one run (``train``, ``sft``,
``eval``, ``demo``, ``rro``) and writes its run directory; a recipe's construction checks the config, its
``setup()`` builds the parts and its ``run()`` runs (docs/architecture.md). Only the API and the CLI import this
layer."""
