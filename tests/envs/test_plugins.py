"""Envs from outside creditflow: entry-point plug-ins, ``module:Class``, ``register``; bad plug-ins are one line,
exit 2, before any work.

Plug-ins are real installed distributions to importlib.metadata: a ``*.dist-info`` folder with an
``entry_points.txt`` on ``sys.path`` (what ``pip install`` writes), so the lookup is the one users get.
"""

import pickle
import sys

import pytest

from creditflow import envs
from creditflow.cli import main
from creditflow.envs import EnvError

WALK = "tests.envs.plugin_envs:WalkEnv"


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """``install(package, {name: "module:Class"}, {module: source})``: a distribution declaring envs."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def install(package: str, entries: dict[str, str], modules: dict[str, str] | None = None):
        info = site / f"{package}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[creditflow.envs]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
        for name, text in (modules or {}).items():
            (site / f"{name}.py").write_text(text)
        envs._entry_points.cache_clear()

    yield install
    envs._entry_points.cache_clear()


@pytest.fixture
def registry(monkeypatch):
    """register() calls of a test stay in that test."""
    monkeypatch.setattr(envs, "_REGISTERED", {})


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


# -- plug-ins that work ------------------------------------------------------------------------------------------


def test_a_plugin_is_listed_with_its_options_next_to_the_builtins(plugins, capsys):
    plugins("walkpkg", {"walk": WALK, "walkfactory": "tests.envs.plugin_envs:make_walk"})
    code, out, _ = run_cli(["envs"], capsys)
    assert code == 0
    assert "sokoban: Box pushing" in out and "    num_boxes = 1" in out
    assert f"walk: Walk right to the end of a short line (a plug-in env that keeps the protocol). [plug-in of " \
           f"package walkpkg: {WALK}]" in out
    block = out[out.index("walk: "):]
    assert block.splitlines()[1:3] == ["    length = 3", "    max_steps = 6"]
    assert "walkfactory: A factory function" in out


def test_a_plugin_resolves_by_name_with_checked_options(plugins):
    plugins("walkpkg", {"walk": WALK})
    assert "walk" in envs.env_names() and envs.plugin_names() == ["walk"]
    env = envs.make("walk", length=2)
    assert env.reset(seed=0)[0] == "at 0 of 3" and not envs.is_builtin("walk")
    with pytest.raises(EnvError, match="option length must be an integer, got 'long'"):
        envs.make("walk", length="long")
    with pytest.raises(EnvError, match=r"no option\(s\) size; options: length, max_steps"):
        envs.make("walk", size=3)


def test_module_class_and_module_factory_need_no_packaging():
    env = envs.make(WALK, length=4)
    assert env.reset(seed=0)[0] == "at 0 of 5"
    assert envs.env_options("tests.envs.plugin_envs:make_walk") == {"length": 3}
    assert envs.make("tests.envs.plugin_envs:make_walk", length=2).length == 2


def test_a_module_in_the_current_directory_is_found_as_uvicorn_finds_one(tmp_path, monkeypatch):
    (tmp_path / "localenv.py").write_text("from tests.envs.plugin_envs import WalkEnv as Local\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "localenv", raising=False)
    assert envs.make("localenv:Local").reset(seed=0)[0] == "at 0 of 4"
    sys.modules.pop("localenv", None)


def test_register_takes_a_target_a_class_or_a_factory(registry):
    envs.register("walk-str", WALK)
    from tests.envs.plugin_envs import WalkEnv

    envs.register("walk-cls", WalkEnv, "a walk")
    envs.register("walk-fn", lambda length=2: WalkEnv(length=length))
    assert {"walk-str", "walk-cls", "walk-fn"} <= set(envs.env_names())
    assert envs.summary("walk-cls") == "a walk"
    assert envs.make("walk-fn").length == 2 and envs.make("walk-fn", length=5).length == 5
    assert envs.env_options("walk-cls") == {"length": 3, "max_steps": 6}
    with pytest.raises(EnvError, match="'sokoban' is a built-in env"):
        envs.register("sokoban", WalkEnv)


def test_a_factory_of_a_registered_env_carries_its_class_into_other_processes(registry):
    from tests.envs.plugin_envs import WalkEnv

    envs.register("walk-cls", WalkEnv)
    factory = envs.factory("walk-cls", length=2)
    envs._REGISTERED.clear()  # a Ray worker never saw the register() call
    copy = pickle.loads(pickle.dumps(factory))
    assert copy().length == 2
    by_name = pickle.loads(pickle.dumps(envs.factory("sokoban", size=5)))
    assert by_name.target is None and by_name().height == 5


# -- bad plug-ins: one line, exit 2, before any work ------------------------------------------------------------

BAD = {
    "broken": "broken_mod:Env",
    "syntax": "syntax_mod:Env",
    "nostep": "tests.envs.plugin_envs:NoStep",
    "nokey": "tests.envs.plugin_envs:NoStateKey",
    "nomax": "tests.envs.plugin_envs:NoMaxSteps",
    "missing": "tests.envs.plugin_envs:Nope",
}
MODULES = {"broken_mod": "import numpyy_not_installed\n", "syntax_mod": "class Env(:\n"}


@pytest.mark.parametrize("env,needle", [
    ("broken", "env 'broken' (plug-in of package badpkg: broken_mod:Env): cannot import module 'broken_mod': "
               "ModuleNotFoundError: No module named 'numpyy_not_installed'"),
    ("syntax", "cannot import module 'syntax_mod': SyntaxError: invalid syntax"),
    ("nostep", "class NoStep has no step() method; an env needs reset() and step()"),
    ("nokey", "env 'nokey' (plug-in of package badpkg: tests.envs.plugin_envs:NoStateKey): first reset: info has no "
              "'state_key' key"),
    ("nomax", "has no max_steps (a positive integer): episodes need a turn limit"),
    ("missing", "module 'tests.envs.plugin_envs' has no attribute 'Nope'"),
    ("sokoban", "plug-in env 'sokoban' of badpkg (tests.envs.plugin_envs:WalkEnv) has the name of a built-in env"),
    ("no_such_module:Env", "env 'no_such_module:Env': cannot import module 'no_such_module': ModuleNotFoundError"),
    ("tests.envs.plugin_envs:make_walk_typo", "has no attribute 'make_walk_typo'"),
])
def test_a_bad_plugin_is_one_line_exit_2_before_any_work(plugins, capsys, tmp_path, env, needle):
    plugins("badpkg", {**BAD, "sokoban": WALK}, MODULES)
    out = tmp_path / "run"
    code, _, err = run_cli(["train", "--env", env, "--out", str(out), "rl.steps=1"], capsys)
    assert code == 2
    assert needle in one_line(err)
    assert not out.exists()


def test_a_plugin_declared_by_two_packages_is_refused(plugins):
    plugins("one", {"walk": WALK})
    plugins("two", {"walk": WALK})
    with pytest.raises(EnvError, match=r"declared by two packages \(one and two\); uninstall one"):
        envs.make("walk")


def test_the_listing_names_each_bad_plugin_in_one_line_and_exits_2(plugins, capsys):
    plugins("badpkg", {**BAD, "sokoban": WALK, "walk": WALK}, MODULES)
    code, out, err = run_cli(["envs"], capsys)
    assert code == 2
    assert "walk: Walk right" in out and "sql: " in out  # the good ones are still listed
    lines = err.strip().splitlines()
    assert all(line.startswith("error: ") for line in lines)
    assert sorted(line.split("'")[1] for line in lines) == ["broken", "missing", "nostep", "sokoban", "syntax"]


@pytest.mark.parametrize("argv", [
    ["train"], ["sft"], ["demo"], ["rro", "collect"], ["rro", "run"], ["eval", "--model", "{tiny}"],
])
def test_every_command_resolves_and_checks_a_plugin_before_any_work(plugins, capsys, tmp_path, tiny_model_dir, argv):
    plugins("badpkg", {"nokey": "tests.envs.plugin_envs:NoStateKey"})
    out = tmp_path / "run"
    argv = [str(tiny_model_dir) if a == "{tiny}" else a for a in argv]
    extra = [] if argv[0] == "eval" else ["--out", str(out)]
    code, _, err = run_cli([*argv, "--env", "nokey", *extra], capsys)
    assert code == 2 and "first reset: info has no 'state_key' key" in one_line(err)
    assert not out.exists()


def test_an_env_without_an_expert_trains_only_from_a_given_model(plugins, capsys, tmp_path):
    plugins("pkg", {"noexpert": "tests.envs.plugin_envs:NoExpert"})
    code, _, err = run_cli(["sft", "--env", "noexpert", "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "has no expert (an expert_actions() method): SFT trains on expert demonstrations" in \
        one_line(err)
    code, _, err = run_cli(["train", "--env", "noexpert", "--out", str(tmp_path / "b")], capsys)
    assert code == 2 and "without --model, train starts from SFT on expert demonstrations; give --model DIR" in \
        one_line(err)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_factory_that_returns_no_env_or_raises_is_one_line(registry):
    envs.register("notenv", lambda: object())
    with pytest.raises(EnvError, match=r"returned 'object', which has no reset\(\) or step\(\) method"):
        envs.make("notenv")

    def boom(size: int = 1):
        raise ValueError(f"size {size} is too small")

    envs.register("boom", boom)
    with pytest.raises(EnvError, match="env 'boom' .*building the env raised ValueError: size 1 is too small"):
        envs.make("boom")


def test_an_adapter_prefix_wins_over_a_module_of_the_same_name(monkeypatch):
    from creditflow.envs import adapters

    monkeypatch.setitem(adapters.ADAPTERS, "tests", "tests.envs.plugin_envs:SpecEnv")  # `tests` is a module too
    env = envs.make("tests:some/env-id", length=2)
    assert env.spec == "some/env-id" and env.length == 2
    assert envs.env_options("tests:x") == {"length": 3} and envs.source("tests:x") == "adapter tests"
    assert envs.make(WALK).length == 3  # another prefix: module:Class
