from creditflow.envs import make
from creditflow.policy.backends.base import Generation, SamplingParams
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.engine import EpisodeRules, RolloutEngine, TaskSpec
from creditflow.rollout.trajectory import StartState


class ScriptedBackend:
    """Answers every prompt with ``responder(prompt_ids)``."""

    def __init__(self, responder):
        self.responder = responder

    def generate(self, prompts, params):
        return [Generation(text=self.responder(p), token_ids=[7, 8], logprobs=[-0.1, -0.2]) for p in prompts]


def encode(messages):  # prompt ids = bytes of the text (enough for bookkeeping)
    return list(messages[0]["content"].encode())[-50:]


def engine(responder, **kw):
    return RolloutEngine(ScriptedBackend(responder), encode, lambda: make("sokoban"),
                         PromptBuilder("sokoban"), SamplingParams(), **kw)


def test_lockstep_groups_drop_out_when_done():
    # seed 1 is solved by right, down, down: episode 0 follows that plan, episode 1 always says 'up'
    plan = ["right", "down", "down"]

    class TwoPolicies:
        batch_sizes = []

        def generate(self, prompts, params):
            self.batch_sizes.append(len(prompts))
            t = len(self.batch_sizes) - 1
            res = []
            for j in range(len(prompts)):
                if len(prompts) == 2 and j == 0 and t < 3:
                    res.append(Generation(f"<action>{plan[t]}</action>", [1], [-0.1]))
                else:
                    res.append(Generation("<action>up</action>", [1, 2], [-0.1, -0.3]))
            return res

    backend = TwoPolicies()
    eng = RolloutEngine(backend, encode, lambda: make("sokoban"), PromptBuilder("sokoban"), SamplingParams())
    trajs = eng.rollout([TaskSpec("sokoban/1", 1)], group_size=2)
    assert [len(t) for t in trajs] == [3, 15]
    assert trajs[0].success and not trajs[1].success
    assert backend.batch_sizes == [2, 2, 2] + [1] * 12  # one batched call per turn; finished ones drop out
    assert trajs[0].group_id == trajs[1].group_id == "sokoban/1"
    assert trajs[0].steps[-1].done and trajs[0].final_state == trajs[0].steps[-1].next_state
    step = trajs[1].steps[0]
    assert step.response_ids == [1, 2] and step.logprobs == [-0.1, -0.3] and step.prompt_ids
    assert eng.stats.env_steps == 18 and eng.stats.generate_calls == 15


def test_invalid_output_costs_penalty_and_does_not_move():
    eng = engine(lambda p: "I refuse", rules=EpisodeRules(invalid_penalty=0.5))
    traj = eng.rollout([TaskSpec("sokoban/1", 1)], 1)[0]
    assert len(traj) == 15 and not traj.success
    first = traj.steps[0]
    assert first.valid is False
    assert first.reward == -0.1 - 0.5
    assert all(s.state == first.state for s in traj.steps)


def test_start_from_prefix_rebuilds_history_and_restores_state():
    env = make("sokoban")
    obs0, _ = env.reset(seed=1)
    obs1 = env.step("right")[0]
    seen = []

    class Capture:
        def generate(self, prompts, params):
            seen.extend(prompts)
            return [Generation("<action>down</action>", [1], [0.0]) for _ in prompts]

    full = lambda messages: list(messages[0]["content"].encode())
    eng = RolloutEngine(Capture(), full, lambda: make("sokoban"), PromptBuilder("sokoban"), SamplingParams())
    for spec in (TaskSpec("s/1", 1, start=StartState(1, ["right"], [obs0, obs1])),
                 TaskSpec("s/1", 1, start=StartState(1, ["right"], [obs0, obs1],
                                                     snapshot={"seed": 1, "player": (1, 3), "boxes": [(2, 3)],
                                                               "steps_taken": 1, "done": False}))):
        seen.clear()
        traj = eng.rollout([spec], 1)[0]
        assert [s.action for s in traj.steps] == ["down", "down"] and traj.success
        assert traj.meta["start_step"] == 1
        first_prompt = bytes(seen[0]).decode()
        assert "already taken 1 step(s)" in first_prompt and "Action 1: right" in first_prompt
        assert obs0 in first_prompt and obs1 in first_prompt


def test_replay_mismatch_is_counted_and_skipped():
    eng = engine(lambda p: "<action>down</action>")
    bad = TaskSpec("s/1", 1, start=StartState(1, ["right"], ["not the start", "x"]))
    good = TaskSpec("s/2", 2)
    trajs = eng.rollout([bad, good], 2)
    assert eng.stats.restore_mismatches == 2
    assert [t.task_id for t in trajs] == ["s/2", "s/2"]


# -- the conversation layout -----------------------------------------------------------------------------

import pytest  # noqa: E402

from creditflow.policy.load import load_tokenizer  # noqa: E402
from creditflow.policy.prompts import ChatTemplate, Turn, format_response  # noqa: E402


class CanonicalBackend:
    """Answers with ``format_response(plan[turn])`` as the tokenizer spells it, ending with eos (or, every
    other turn, stopped at ``</action>`` without it)."""

    def __init__(self, tok, plan):
        self.tok, self.plan, self.turn = tok, plan, 0

    def generate(self, prompts, params):
        text = format_response(self.plan[min(self.turn, len(self.plan) - 1)])
        ids = self.tok.encode(text, add_special_tokens=False) + ([self.tok.eos_token_id] if self.turn % 2 else [])
        self.turn += 1
        return [Generation(text, ids, [-0.1] * len(ids)) for _ in prompts]


@pytest.fixture
def chat(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    return tok, ChatTemplate(tok)


def conversation_engine(tok, chat, plan, **kw):
    return RolloutEngine(CanonicalBackend(tok, plan), chat.encode, lambda: make("sokoban"),
                         PromptBuilder("sokoban", template="compact", history="conversation"), SamplingParams(),
                         chat=chat, **kw)


def test_conversation_prompts_grow_by_the_sampled_ids(chat):
    tok, template = chat
    eng = conversation_engine(tok, template, ["up", "left", "up", "right"], rules=EpisodeRules(max_steps=4))
    traj = eng.rollout([TaskSpec("sokoban/1", 1)], 1)[0]
    steps = traj.steps
    assert len(steps) == 4
    for prev, step in zip(steps, steps[1:]):
        head = prev.prompt_ids + prev.response_ids
        assert step.prompt_ids[: len(head)] == head  # a prefix, sampled ids verbatim
        assert "Step" in tok.decode(step.prompt_ids[len(head):])  # then the next observation as a user turn
    # token-level appending gives the chat template's rendering of the same conversation
    turns = [Turn(s.observation, ["up", "down", "left", "right"], s.action, s.response) for s in steps[:3]]
    first = steps[0]
    messages = eng.prompts.chat(traj.end_info["task"], turns, steps[3].observation, ["up", "down", "left", "right"])
    assert template.encode(messages) == steps[3].prompt_ids
    assert first.prompt_ids == template.encode(messages[:1])


def test_conversation_restarts_rebuild_the_path(chat):
    """A branch from a mid-episode state (CRPS replay, RRO) rebuilds the conversation from the path; with
    canonical responses it is the live conversation token for token, and prompt_at gives the same chat."""
    tok, template = chat
    plan = ["up", "left", "up", "right", "down"]
    live = conversation_engine(tok, template, plan, rules=EpisodeRules(max_steps=5)).rollout(
        [TaskSpec("sokoban/1", 1)], 1)[0]
    for t in (1, 3):
        eng = conversation_engine(tok, template, plan[t:], rules=EpisodeRules(max_steps=5))
        state = live.prefix(t)
        env = make("sokoban")
        env.reset(seed=1)
        for action in state.actions:
            env.step(action)
        for snapshot in (None, env.snapshot()):  # by verified replay, and from the env's snapshot
            state.snapshot = snapshot
            (branch,) = eng.branch(state, 1, task_id="sokoban/1", max_turns=1)
            assert branch.steps[0].prompt_ids == live.steps[t].prompt_ids
        open_traj = conversation_engine(tok, template, plan, rules=EpisodeRules(max_steps=5)).branch(
            live.prefix(0), 1, task_id="sokoban/1", max_turns=t)[0]
        assert template.encode(eng.prompt_at(open_traj)) == live.steps[t].prompt_ids


def test_conversation_layout_needs_the_chat_template():
    with pytest.raises(ValueError, match="ChatTemplate"):
        RolloutEngine(ScriptedBackend(lambda p: ""), encode, lambda: make("sokoban"),
                      PromptBuilder("sokoban", history="conversation"), SamplingParams())


# -- rollout.max_steps: the cut, recorded as truncated, and the env told ------------------------------------------

from creditflow.rollout.evaluate import rollout_metrics  # noqa: E402
from creditflow.rollout.trajectory import SuccessRule, Trajectory  # noqa: E402
from tests.envs import plugin_envs  # noqa: E402


def walk_engine(env_cls, responder, max_steps, success_rule=SuccessRule()):
    made = []

    def factory():
        made.append(env_cls(length=3, max_steps=6))
        return made[-1]

    eng = RolloutEngine(ScriptedBackend(responder), encode, factory, PromptBuilder("walk"), SamplingParams(),
                        EpisodeRules(max_steps=max_steps, success_rule=success_rule))
    return eng, made


def test_a_cut_by_max_steps_is_recorded_as_truncated_and_an_env_without_truncate_is_not_told():
    # seed 1 is solved by right, down, down; 'up' walks into the wall until the cut at 3 (sokoban's own limit: 15)
    plans = {0: ["right", "down", "down"], 1: ["up"] * 3}

    class TwoPolicies:
        calls = 0

        def generate(self, prompts, params):
            t, self.calls = self.calls, self.calls + 1
            return [Generation(f"<action>{plans[j if len(prompts) == 2 else 1][t]}</action>", [1], [-0.1])
                    for j in range(len(prompts))]

    eng = RolloutEngine(TwoPolicies(), encode, lambda: make("sokoban"), PromptBuilder("sokoban"), SamplingParams(),
                        EpisodeRules(max_steps=3))
    solved, cut = eng.rollout([TaskSpec("sokoban/1", 1)], group_size=2)
    assert solved.success and solved.done and not solved.truncated  # ended by the env, at the limit's step
    assert cut.done and cut.truncated and not cut.success and len(cut) == 3
    assert [s.truncated for s in cut.steps] == [False, False, True]
    assert cut.steps[-1].to_dict()["truncated"] is True and "truncated" not in solved.steps[-1].to_dict()
    assert Trajectory.from_dict(cut.to_dict()).truncated  # the JSONL round trip keeps it
    assert rollout_metrics([solved, cut], "train")["train/truncated_frac"] == 0.5


def test_a_cut_tells_the_env_which_scores_the_episode_as_it_stands():
    eng, made = walk_engine(plugin_envs.CutWalk, lambda p: "<action>right</action>", max_steps=2)
    traj, = eng.rollout([TaskSpec("walk/0", 0)], 1)  # seed 0: the goal is 4 away; cut after 2 rights
    env, = made
    assert env.goal == 4 and env.cuts == 1 and traj.truncated and len(traj) == 2
    assert traj.score == traj.steps[-1].info["score"] == 0.5  # the env's verdict on the cut episode, not 0
    assert traj.steps[-1].reward == 0.5  # the step's own reward (0) + the reward truncate() returned
    assert traj.steps[-1].valid and not traj.success
    # a graded run (env.success_threshold) counts a cut episode the env scored high enough as a success
    eng, made = walk_engine(plugin_envs.CutWalk, lambda p: "<action>right</action>", max_steps=2,
                            success_rule=SuccessRule(threshold=0.5))
    assert eng.rollout([TaskSpec("walk/0", 0)], 1)[0].success


def test_an_episode_the_env_ends_itself_is_not_cut_and_its_env_not_told():
    # engine limit = the env's own (6): the env truncates at step 6 itself, so truncate() is never called
    eng, made = walk_engine(plugin_envs.CutWalk, lambda p: "<action>left</action>", max_steps=6)
    traj, = eng.rollout([TaskSpec("walk/0", 0)], 1)
    assert len(traj) == 6 and traj.truncated and made[0].cuts == 0
    eng, made = walk_engine(plugin_envs.CutWalk, lambda p: "<action>right</action>", max_steps=3)
    traj, = eng.rollout([TaskSpec("walk/1", 1)], 1)  # seed 1: the goal 3 away, reached at the cut's step
    assert made[0].goal == 3 and traj.success and not traj.truncated and made[0].cuts == 0
