"""Every number is checked before any work, with the option named (issue 63, class 3).

The cases are generated from the schemas themselves: every numeric field of the run config (``RunConfig``,
section by section), of every estimator's knob model and of the graph knobs, and every float option of the
envs. For each: a value just outside its declared range, NaN and the infinities are one line naming the
option; ``true`` is no number. A numeric field without a declared range must be listed in ``ANY_FINITE``.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any, Union

import annotated_types
import pytest
from pydantic import BaseModel

from creditflow import credit, envs
from creditflow.cli import main
from creditflow.config import RunConfig, build_config
from creditflow.credit.registry import validate_model
from creditflow.credit.rewardflow import GraphKnobs
from creditflow.errors import UserError

ANY_FINITE = {  # numeric fields where every finite number means something
    "env.success_threshold",  # a graded env's score threshold: any score scale
    "rro.invalid_action_reward",  # a process reward below every score: any scale
    "success_threshold",  # the graph knob, as env.success_threshold
}
NOT_OVERRIDES = {"resumes"}  # written by creditflow, not a setting


def _args(annotation) -> tuple:
    return typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,)


def numeric_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type, Any]]:
    """``(dotted name, int or float, field)`` for every int/float field of ``model``, nested sections too."""
    out = []
    for name, field in model.model_fields.items():
        if name in NOT_OVERRIDES:
            continue
        args = _args(field.annotation)
        sections = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if sections:
            out += numeric_fields(sections[0], f"{prefix}{name}.")
        elif int in args or float in args:
            out.append((f"{prefix}{name}", float if float in args else int, field))
    return out


def outside(kind: type, field) -> list[Any]:
    """Values just outside ``field``'s declared range, and NaN and the infinities for a float."""
    values = []
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            values.append(bound.ge - (1 if kind is int else 0.5))
        elif isinstance(bound, annotated_types.Gt):
            values.append(bound.gt)
        elif isinstance(bound, annotated_types.Le):
            values.append(bound.le + (1 if kind is int else 0.5))
        elif isinstance(bound, annotated_types.Lt):
            values.append(bound.lt)
        elif isinstance(bound, annotated_types.MultipleOf):
            values.append(bound.multiple_of * 16 + 1)
    return values + ([math.nan, math.inf, -math.inf] if kind is float else [])


def yaml_text(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return repr(value)


CONFIG = numeric_fields(RunConfig)
CONFIG_CASES = [(name, yaml_text(v)) for name, kind, field in CONFIG for v in outside(kind, field)]


def test_every_numeric_option_declares_its_range():
    unbounded = [name for name, kind, field in CONFIG if name not in ANY_FINITE
                 and not any(isinstance(b, (annotated_types.Ge, annotated_types.Gt)) for b in field.metadata)]
    assert not unbounded, f"declare a range (Field(ge=/gt=/le=/lt=)) or list in ANY_FINITE: {unbounded}"
    assert len(CONFIG) > 60


def test_defaults_are_inside_their_ranges():
    """pydantic does not validate defaults: every default must pass its own field's checks."""
    assert RunConfig.model_validate(RunConfig().model_dump()) == RunConfig()


@pytest.mark.parametrize("name, text", CONFIG_CASES, ids=[f"{n}={t}" for n, t in CONFIG_CASES])
def test_out_of_range_and_non_finite_options_name_the_option(name, text):
    with pytest.raises(UserError) as exc:
        build_config(None, [f"{name}={text}"])
    message = str(exc.value)
    assert message.startswith(f"config: {name}: ") and "\n" not in message, message


@pytest.mark.parametrize("text", ["[0.1, 1.5]", "[-0.5, 0.5]", "[.nan, 0.5]", "[0.2, .inf]", "[0.5]", "[0.2, 0.5, 0.8]",
                                  "[0.8, 0.2]"])
def test_the_curriculum_band_is_checked_item_by_item(text):
    with pytest.raises(UserError, match=r"^config: curriculum\.band"):
        build_config(None, [f"curriculum.band={text}"])


@pytest.mark.parametrize("name", [name for name, _, _ in CONFIG])
def test_true_is_no_number(name):
    with pytest.raises(UserError, match=rf"^config: {name}: expects a number, not true or false"):
        build_config(None, [f"{name}=true"])


def test_a_yaml_file_names_the_file_and_the_option(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rl:\n  lr: .inf\n")
    with pytest.raises(UserError, match=rf"^{path}: rl\.lr: Input should be a finite number"):
        build_config(path)


@pytest.mark.parametrize("argv", [
    ["train", "rl.clip_eps_high=-5"], ["train", "generation.temperature=.inf"], ["sft", "rl.lr=.inf"],
    ["rro", "collect", "rollout.invalid_penalty=.nan"], ["rro", "run", "env.success_threshold=.nan"],
    ["demo", "seed=-1"], ["train", "seed=4294967296"],
])
def test_the_cli_says_it_in_one_line(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.match(rf"error: (demo )?config: {argv[-1].split('=')[0]}: ", err), err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------
# estimator knobs
# --------------------------------------------------------------------------------------------------

KNOB_MODELS = {**{name: credit.knob_model(name) for name in credit.estimator_names()}, "graph": GraphKnobs}
KNOB_CASES = [(model, name, v) for model in KNOB_MODELS for name, kind, field in numeric_fields(KNOB_MODELS[model])
              for v in outside(kind, field)]


def test_every_numeric_knob_declares_its_range():
    for model in KNOB_MODELS.values():
        for name, _, field in numeric_fields(model):
            assert name in ANY_FINITE or any(isinstance(b, (annotated_types.Ge, annotated_types.Gt))
                                             for b in field.metadata), f"{model.__name__}.{name}"


@pytest.mark.parametrize("model, name, value", KNOB_CASES, ids=[f"{m}.{n}={v}" for m, n, v in KNOB_CASES])
def test_out_of_range_and_non_finite_knobs_name_the_knob(model, name, value):
    for given, strings in ((value, False), (repr(value) if math.isfinite(value) else str(value), True)):
        with pytest.raises(credit.CreditError, match=rf"^knob {name} (must be|expects)"):
            validate_model(KNOB_MODELS[model], {name: given}, model, strings=strings)


def test_a_bad_knob_in_the_run_config_names_rl_credit():
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "rewardflow", "rl.credit.gamma=.nan", "--out", "/nonexistent/never"])
    assert exc.value.code == 2


# --------------------------------------------------------------------------------------------------
# env options
# --------------------------------------------------------------------------------------------------


def env_float_options() -> list[tuple[str, str]]:
    out = []
    for env in ("sokoban", "sql", "webshop"):
        for option, hint in envs.option_types(env).items():
            if float in _args(hint):
                out.append((env, option))
    return out


@pytest.mark.parametrize("env, option", env_float_options())
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_env_options_name_the_option(env, option, value):
    with pytest.raises(envs.EnvError, match=rf"^env '{env}': option {option} must be a finite number"):
        envs.make(env, **{option: value})
