"""creditflow's ``creditflow_v1`` entry point of ``verl.plugins`` (``pyproject.toml``): creditflow's estimators, and
creditflow's v1 trainer classes in verl's trainer registry (:func:`creditflow.integrations.verl_v1.install`; it
needs ``transfer_queue``, as verl's v1 trainer does). An import that registers, for the reason
:mod:`creditflow.integrations.verl_plugin` gives, whichever module is imported first
(:mod:`creditflow.integrations.plugins`).
"""

from creditflow.integrations.plugins import register_when_ready

register_when_ready("registering creditflow's estimators in verl", ["creditflow.integrations.verl"],
                    lambda bridge: bridge.register(),
                    "verl does not run creditflow's estimator under a name this did not register "
                    "(algorithm.adv_estimator=NAME is unknown there, or another's); fix the cause, or call "
                    "creditflow.integrations.verl.register() before the trainer is built")
register_when_ready("installing creditflow's v1 trainer classes in verl",
                    ["creditflow.integrations.verl", "creditflow.integrations.verl_v1"],
                    lambda bridge, v1: v1.install(),
                    "verl's v1 trainer (trainer.use_v1=True) stops at a creditflow estimator, saying its rows are "
                    "missing; the legacy trainer is not affected", optional=["transfer_queue"])
