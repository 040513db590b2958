"""SkyRL's ``main_base`` entry point (``skyrl.train.entrypoints.main_base``, skyrl 0.4) with creditflow's trainer:
the same overrides, ``trainer.algorithm.advantage_estimator`` any creditflow estimator by its trainer name
(:data:`creditflow.integrations.rows.ESTIMATORS`: rewardflow, gigpo, graphgpo, g2po, gagpo,
creditflow_grpo, creditflow_rloo, ...), and creditflow's knobs under ``trainer.algorithm.creditflow`` (docs/skyrl.md)::

    python -m creditflow.integrations.skyrl_main trainer.algorithm.advantage_estimator=rewardflow \\
        generator.step_wise_trajectories=true trainer.algorithm.creditflow.gamma=0.9 ...

SkyRL's own ``python -m skyrl.train.entrypoints.main_base ... trainer.override_entrypoint=creditflow.integrations.skyrl_main``
lands here too (SkyRL hands the command line to this module's :func:`main`).
"""

from __future__ import annotations

import sys

import ray
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.utils import initialize_ray

from creditflow.integrations.skyrl import CreditflowRayPPOTrainer, CreditflowSkyRLTrainConfig, register

OVERRIDE = "trainer.override_entrypoint="


class CreditflowPPOExp(BasePPOExp):
    """SkyRL's experiment with :class:`~creditflow.integrations.skyrl.CreditflowRayPPOTrainer` as its trainer."""

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator,
                    colocate_pg):
        return CreditflowRayPPOTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                       eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                       generator=generator, colocate_pg=colocate_pg)


@ray.remote(num_cpus=1)
def creditflow_entrypoint(cfg) -> None:
    CreditflowPPOExp(cfg).run()


def config_from_args(args: list[str]):
    """SkyRL's typed config (with ``trainer.algorithm.creditflow``) from command-line overrides; SkyRL's
    ``trainer.override_entrypoint`` (which brought the command here) is dropped."""
    return CreditflowSkyRLTrainConfig.from_cli_overrides([a for a in args if not a.startswith(OVERRIDE)])


def main() -> None:
    register()  # creditflow's estimators in SkyRL's registry: their names validate
    cfg = config_from_args(sys.argv[1:])
    validate_cfg(cfg)
    initialize_ray(cfg)  # syncs the registry to SkyRL's registry actor
    ray.get(creditflow_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
