"""`creditflow config`: the full config as commented YAML, which `creditflow train --config` reads back unchanged."""

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from creditflow.cli import app, main
from creditflow.config import RunConfig, build_config
from creditflow.configdoc import commented_yaml, constraints

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
runner = CliRunner()


def config_output(*args: str) -> str:
    result = runner.invoke(app, ["config", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("args", [
    [],
    ["--config", str(CONFIGS / "sokoban_grpo.yaml"), "env.kwargs.num_boxes=2", "rl.credit.gamma=0.9",
     "policy.lora=true", "policy.lora.target_modules=[q_proj, v_proj]", "rl.tis_cap=2", "curriculum.band=[0.1, 0.9]",
     "policy.model_name='0.5'", "policy.model=runs/my model", "generation.temperature=0.7", "rl.lr=3e-6"],
])
def test_printed_config_reads_back_to_the_same_config(tmp_path, args):
    text = config_output(*args)
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    config = [a for a in args if not a.startswith("--config") and "=" in a]
    base = args[args.index("--config") + 1] if "--config" in args else None
    assert build_config(path) == build_config(base, config)  # what `creditflow train --config run.yaml` builds
    assert config_output("--config", str(path)) == text  # printing it again changes nothing


def test_every_setting_is_printed_with_its_docstring():
    text = commented_yaml(RunConfig())
    data = yaml.safe_load(text)
    assert set(data) == set(RunConfig.model_fields) - {"resumes"}  # resumes is written by creditflow, not set
    lines = text.splitlines()
    for section, model in ((None, RunConfig), *((name, type(getattr(RunConfig(), name))) for name in
                                               ("env", "policy", "generation", "rollout", "rl", "sft", "curriculum",
                                                "rro"))):
        for name, info in model.model_fields.items():
            if name == "resumes" or not info.description:
                continue
            indent = "" if section is None else "  "
            where = next(i for i, line in enumerate(lines) if re.match(rf"{indent}{name}:", line)
                         and (section is None or _inside(lines, i, section)))
            comments = []
            for line in reversed(lines[:where]):
                if not line.strip().startswith("#"):
                    break
                comments.insert(0, line.strip()[2:])
            assert " ".join(info.description.split())[:40] in " ".join(comments), (section, name)


def _inside(lines, i, section):
    """Line i is in the top-level section ``section``."""
    for line in reversed(lines[:i]):
        if re.match(r"[a-z_]+:", line):
            return line.startswith(f"{section}:")
    return False


def test_constraints_come_from_the_fields():
    fields = RunConfig.model_fields
    policy, rollout = fields["policy"].annotation.model_fields, fields["rollout"].annotation.model_fields
    # (other bounds may join these fields' own; each named here must be printed)
    assert constraints(rollout["group_size"]).startswith("accepts: int >= 1")
    assert constraints(policy["backend"]) == "accepts: one of hf, vllm, openai"
    assert constraints(policy["vllm_gpu_memory_utilization"]).startswith("accepts: float > 0, <= 1")
    assert constraints(policy["tiny_vocab_size"]).startswith("accepts: int >= 300")
    assert constraints(policy["tiny_vocab_size"]).endswith(", or null")
    assert constraints(policy["model"]) == "accepts: str or null"
    assert constraints(policy["share_prefix"]) == ""  # a plain bool: nothing to add

    from typing import Annotated, Literal, Optional

    from pydantic import BaseModel, Field

    class Knobs(BaseModel):
        a: float = Field(0.5, ge=0, lt=1, allow_inf_nan=False)
        b: Optional[Annotated[float, Field(gt=0)]] = None
        c: Optional[Literal["x", "y"]] = None

    assert constraints(Knobs.model_fields["a"]) == "accepts: finite float >= 0, < 1"
    assert constraints(Knobs.model_fields["b"], {"allow_inf_nan": False}) == "accepts: finite float > 0, or null"
    assert constraints(Knobs.model_fields["b"]) == "accepts: float > 0, or null"
    assert constraints(Knobs.model_fields["c"]) == "accepts: one of x, y, or null"
    text = commented_yaml(RunConfig())
    assert re.search(r"\n  # accepts: int >= 1[^\n]*\n  group_size: 8\n", text)


def test_a_bad_override_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["config", "rollout.group_size=0"])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().startswith("error: config: rollout.group_size:") and "\n" not in captured.err.strip()
