"""creditflow's ``creditflow`` entry point of ``verl.plugins`` (``pyproject.toml``): creditflow's estimators in
verl's advantage-estimator registry (:func:`creditflow.integrations.verl.register`).

verl 0.9 imports each plugin's module on ``import verl``, in every process, and calls nothing: so here, and only
in the plugin modules, importing is what registers. The bridge modules register nothing on import; without the
plugins (``VERL_USE_EXTERNAL_PLUGINS=none``) call ``register()`` and ``verl_v1.install()`` yourself (docs/verl.md).
"""

from creditflow.integrations import verl

verl.register()
