"""creditflow's ``creditflow`` entry point of ``verl.plugins`` (``pyproject.toml``): creditflow's estimators in
verl's advantage-estimator registry (:func:`creditflow.integrations.verl.register`).

verl 0.9 imports each plugin's module on ``import verl``, in every process, and calls nothing: so here, and only
in the plugin modules, importing is what registers. The bridge modules register nothing on import; without the
plugins (``VERL_USE_EXTERNAL_PLUGINS=none``) call ``register()`` and ``verl_v1.install()`` yourself (docs/verl.md).
Where ``import verl`` is a line of the bridge itself (the bridge imported first), the registration runs when the
bridge has finished importing, and one that fails is a warning (:mod:`creditflow.integrations.plugins`).
"""

from creditflow.integrations.plugins import register_when_ready

register_when_ready("registering creditflow's estimators in verl", ["creditflow.integrations.verl"],
                    lambda bridge: bridge.register(),
                    "verl does not run creditflow's estimator under a name this did not register "
                    "(algorithm.adv_estimator=NAME is unknown there, or another's); fix the cause, or call "
                    "creditflow.integrations.verl.register() before the trainer is built")
