"""Steps that teach nothing, said as they happen: what a step's metrics show when it carries no learning
signal, and the likely cause.

Three things make a step (nearly) empty, each read off the step's metrics row:

- ``train/invalid_frac`` ≥ :data:`INVALID_SHARE`: the policy's responses are mostly not actions the env takes;
- ``train/success_rate`` 0 (every group all-fail) or 1 (every group all-success): outcome-only credit has
  nothing to compare within a group;
- every advantage 0 (``train/adv_mean`` and ``train/adv_std`` both exactly 0): the update has no policy
  gradient. The trainer then skips its forward and backward pass where no other loss term needs it
  (``train/update_skipped``, :meth:`creditflow.trainer.rl.RLTrainer.no_gradient`).

:func:`short` is what the progress line shows, :func:`warning` the line the log gets, with a hint.
"""

from __future__ import annotations

INVALID_SHARE = 0.9
"""The share of invalid actions from which a step is flagged."""


def _zero_advantages(m: dict) -> bool:
    return m.get("train/samples", 1) == 0 or (m.get("train/adv_mean") == 0 and m.get("train/adv_std") == 0)


def reasons(m: dict) -> list[str]:
    """What makes the step of metrics row ``m`` (nearly) empty, as short labels; none for a step with signal."""
    out = []
    if _zero_advantages(m):
        out.append("every advantage 0")
    success = m.get("train/success_rate")
    if success == 0:
        out.append("no rollout succeeded")
    elif success == 1 and _zero_advantages(m):
        out.append("every rollout succeeded")
    invalid = m.get("train/invalid_frac")
    if invalid is not None and invalid >= INVALID_SHARE:
        out.append(f"{100 * invalid:.0f}% invalid actions")
    return out


def short(m: dict) -> str:
    """The progress line's note (empty for a step with signal)."""
    found = reasons(m)
    if not found:
        return ""
    return ("no signal: " if _zero_advantages(m) else "weak signal: ") + ", ".join(found)


def hint(m: dict) -> str:
    """The likely cause of an empty step, and what to change."""
    invalid = m.get("train/invalid_frac")
    if invalid is not None and invalid >= INVALID_SHARE:
        return ("the policy's responses are mostly not actions the env takes: fine-tune it on the env first "
                "(creditflow sft --model DIR, then train --model OUT/sft_model), check that "
                "generation.max_new_tokens leaves room for the closing </action>, and look at a few responses "
                "(creditflow eval --out trajs.jsonl)")
    success = m.get("train/success_rate")
    if success == 0:
        return ("the tasks are too hard for this policy: fine-tune it further first (creditflow sft), make the tasks "
                "easier (env.kwargs), use larger groups (rollout.group_size) or replay its rare successes "
                "(--curriculum crps)")
    if success == 1:
        return "the tasks are too easy for this policy: make them harder (env.kwargs)"
    return ("the estimator gave every step the same value: groups whose rollouts all scored alike give GRPO/RLOO "
            "nothing to compare; larger groups (rollout.group_size) or a step-level estimator (--algo rewardflow)")


def warning(step: int, m: dict) -> str | None:
    """One log line for the step of metrics row ``m`` when it carries (nearly) no signal, else None."""
    found = reasons(m)
    if not found:
        return None
    empty = _zero_advantages(m)
    what = "carries no learning signal" if empty else "carries little learning signal"
    skipped = ("; its forward and backward pass were skipped" if m.get("train/update_skipped")
               else "; the update still ran (an entropy bonus or the KL term has a gradient)" if empty else "")
    return f"warning: step {step} {what} ({', '.join(found)}){skipped}. Likely cause: {hint(m)}"
