"""SkyRL's ``main_base`` entry point with creditflow's trainer: the same Hydra config
(``skyrl_train/config/ppo_base_config.yaml``) and overrides, ``trainer.algorithm.advantage_estimator`` one of
rewardflow, gigpo, graphgpo, g2po, creditflow_grpo, creditflow_rloo (docs/skyrl.md)::

    python -m creditflow.integrations.skyrl_main trainer.algorithm.advantage_estimator=rewardflow \\
        generator.step_wise_trajectories=true +trainer.algorithm.creditflow.gamma=0.9 ...
"""

from __future__ import annotations

import hydra
import ray
from omegaconf import DictConfig
from skyrl_train.entrypoints.main_base import BasePPOExp, config_dir
from skyrl_train.utils import validate_cfg
from skyrl_train.utils.utils import initialize_ray

from creditflow.integrations.skyrl import CreditflowRayPPOTrainer


class CreditflowPPOExp(BasePPOExp):
    """SkyRL's experiment with :class:`~creditflow.integrations.skyrl.CreditflowRayPPOTrainer` as its trainer."""

    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator,
                    colocate_pg):
        return CreditflowRayPPOTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                       eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                       generator=generator, colocate_pg=colocate_pg)


@ray.remote(num_cpus=1)
def creditflow_entrypoint(cfg: DictConfig) -> None:
    CreditflowPPOExp(cfg).run()


@hydra.main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg: DictConfig) -> None:
    validate_cfg(cfg)  # creditflow's estimators are registered (import above): their names validate
    initialize_ray(cfg)  # syncs the registry to SkyRL's registry actor
    ray.get(creditflow_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
