"""A module verl imports before its plugins (``VERL_USE_EXTERNAL_MODULES``): it takes the name ``rewardflow`` in
verl's advantage-estimator registry, as another plugin could (tests/integrations/test_verl_import_order.py)."""

from verl.trainer.ppo import core_algos


@core_algos.register_adv_est("rewardflow")
def someone_elses_rewardflow(token_level_rewards, response_mask, index=None, config=None, **_):
    return token_level_rewards, token_level_rewards
