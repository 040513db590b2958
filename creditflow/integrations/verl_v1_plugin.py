"""creditflow's ``creditflow_v1`` entry point of ``verl.plugins`` (``pyproject.toml``): creditflow's estimators, and
creditflow's v1 trainer classes in verl's trainer registry (:func:`creditflow.integrations.verl_v1.install`; it
needs ``transfer_queue``, as verl's v1 trainer does). An import that registers, for the reason
:mod:`creditflow.integrations.verl_plugin` gives.
"""

from creditflow.integrations import verl, verl_v1

verl.register()
verl_v1.install()
