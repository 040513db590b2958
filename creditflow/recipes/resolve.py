"""The steps of a run config's resolution that read run and model directories: a resumed run's config
(:func:`config_for_resume`: the run's ``config.yaml`` with the overrides, what they change recorded) and the
inference settings saved beside a model (:func:`with_model_settings`: they fill what nobody gave).
:func:`creditflow.api.resolve` writes down the whole order of precedence and applies the first; a recipe applies
the second once it knows the model directory. Below the recipes no part sees the run config, only its sections."""

from __future__ import annotations

import os
from pathlib import Path

from creditflow.config import RunConfig, build_config, changed_settings
from creditflow.errors import UserError
from creditflow.policy import inference
from creditflow.trainer.checkpoint import resume_checkpoint


def with_model_settings(cfg: RunConfig, model_dir: str | Path | None, log=print) -> RunConfig:
    """``cfg`` with the inference settings saved with the model in ``model_dir`` (``policy/inference.py``: its
    template, history layout and window) in place of the defaults. A setting the command gave explicitly wins,
    with one line when it differs from the model's."""
    found = inference.load(model_dir) if model_dir else None
    if not found:
        return cfg
    saved, where = found
    updates: dict[str, dict] = {}
    for key, value in saved.items():
        section_name, name = key.split(".")
        section = getattr(cfg, section_name)
        current = getattr(section, name)
        if name in section.model_fields_set:
            if current != value:
                log(f"note: {key}={current} as given; the model in {model_dir} was trained with {key}={value} "
                    f"({where.name}), which it may need")
        elif current != value:
            updates.setdefault(section_name, {})[name] = value
    if not updates:
        return cfg
    data = cfg.model_dump()
    for section_name, values in updates.items():
        data[section_name].update(values)
    new = RunConfig.model_validate(data)
    for section_name in type(cfg).model_fields:  # what the command set stays "set" (dump_config, resume)
        explicit = getattr(cfg, section_name)
        if hasattr(explicit, "model_fields_set"):
            getattr(new, section_name).model_fields_set.intersection_update(explicit.model_fields_set)
    new.model_fields_set.intersection_update(cfg.model_fields_set)
    return new


def _run_paths(run: Path, cfg: RunConfig, strict: bool = True) -> RunConfig:
    """The run's config with ``policy.model`` where it is from here: a run directory keeps it absolute (since
    0.3); an earlier run's relative path was relative to the directory the run was started in, which its
    ``out_dir`` tells when that was relative too (``runs/rf`` started in ``byo/`` is ``byo/runs/rf``). A path that
    exists nowhere is a one-line UserError naming the file it came from (``strict``; not when an override replaces
    it)."""
    model = cfg.policy.model
    if not model:
        return cfg
    path = Path(model).expanduser()
    started = _started_in(run, cfg.out_dir)
    if not path.is_absolute() and started is not None and (started / path).exists():
        cfg.policy.model = str(started / path)
        return cfg
    if path.exists() or not strict:  # absolute, or relative to here (a run whose start is unknown); or replaced
        return cfg
    where = "" if path.is_absolute() else f" (a relative path there is read from the directory the run was " \
                                             f"started in{f', {started}' if started is not None else ''})"
    raise UserError(f"--resume {str(run)!r}: policy.model {model!r} in {run / 'config.yaml'} does not exist"
                    f"{where}; give policy.model=PATH, where that model is now")


def _started_in(run: Path, out_dir: str) -> Path | None:
    """The directory a run was started in, when its recorded ``out_dir`` is a relative path that ``run`` ends
    with (None otherwise)."""
    recorded = Path(out_dir)
    here = Path(os.path.abspath(run))
    if recorded.is_absolute() or not recorded.parts or here.parts[-len(recorded.parts):] != recorded.parts:
        return None
    return Path(*here.parts[: len(here.parts) - len(recorded.parts)])


def config_for_resume(run_dir: str | Path, overrides: list[str]) -> RunConfig:
    """The config of the run in ``run_dir`` with ``overrides``; what they change is recorded in
    ``cfg.resumes`` with the step it takes effect (step 1 for a run without a checkpoint yet, which starts
    again). A conflicting ``out_dir`` and a run that is already done (``rl.steps`` reached by its newest intact
    checkpoint) are one-line UserErrors."""
    run = Path(run_dir)
    if not run.exists():
        raise UserError(f"--resume {str(run)!r}: no such directory")
    if not run.is_dir():
        raise UserError(f"--resume {str(run)!r} is a file; give the run directory")
    if not (run / "config.yaml").exists():
        raise UserError(f"--resume {str(run)!r}: no config.yaml there (not a creditflow run directory)")
    named = {str.partition(item, "=")[0].strip() for item in overrides}
    moved = "policy.model" in named  # the user's own value is read from here, as any path on the command line
    saved = _run_paths(run, build_config(run / "config.yaml"), strict=not moved)
    cfg = build_config(run / "config.yaml", overrides)
    if not moved:
        cfg.policy.model = saved.policy.model
    given = [item.partition("=")[2] for item in overrides if item.partition("=")[0].strip() == "out_dir"]
    if given and Path(given[-1]).resolve() != run.resolve():
        raise UserError(f"--out {given[-1]!r} conflicts with --resume {str(run)!r}: a resumed run stays in its "
                        f"directory (drop --out, or start a new run there)")
    cfg.out_dir = str(run)
    found = resume_checkpoint(run)
    step = found.step if found is not None else 0  # no checkpoint yet: the run starts again
    if cfg.rl.steps <= step:
        raise UserError(f"--resume {str(run)!r}: the run is already at step {step} and rl.steps is {cfg.rl.steps}, "
                        f"nothing to do (set rl.steps above {step} to train further)")
    changed = changed_settings(saved, cfg)
    lora_changed = sorted(key for key in changed if key.startswith("policy.lora."))
    if lora_changed:
        raise UserError(f"--resume {str(run)!r}: {lora_changed[0]} cannot change in a resumed run (the checkpoint's "
                        f"{'adapter' if saved.policy.lora.enabled else 'weights'} were trained with "
                        f"{lora_changed[0]}={changed[lora_changed[0]][0]!r}); start a new run")
    if changed:
        cfg.resumes = [*saved.resumes, {"from_step": step + 1, "changed": changed}]
    return cfg
