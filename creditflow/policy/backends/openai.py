"""Generation through any OpenAI-compatible server (``vllm serve``, SGLang, TGI, llama.cpp server, ...).

One ``completions`` request per batch with token-id prompts (the ``prompt`` field accepts lists of token
ids), ``logprobs=1`` for the sampled tokens' log-probs, and the vLLM/SGLang extras ``return_token_ids``,
``return_tokens_as_token_ids`` and ``stop_token_ids`` so responses come back as the exact token ids the
server sampled. The text is decoded locally with the model's tokenizer, as :class:`HFBackend` does.

The policy behind a server is fixed, so this backend serves evaluation and RRO collection, not RL
training. Failures (server down, time-outs, 5xx answers, malformed JSON) are retried with exponential
backoff; after the last try a :class:`BackendUnavailable` (a one-line user error, exit 2) is raised.

``openai`` is an optional dependency (``pip install creditflow[openai]``): it is imported where the client
is built, so this module imports without it.
"""

from __future__ import annotations

import importlib.util
import json
import time
from typing import Callable

from creditflow.errors import UserError
from creditflow.policy.backends.base import Generation, SamplingParams

MISSING = "policy.backend=openai needs the openai package{}: pip install 'creditflow[openai]'"


def check_installed() -> None:
    """A one-line UserError where the openai package is not installed (found without importing it), so that a
    run fails before any work."""
    if importlib.util.find_spec("openai") is None:
        raise UserError(MISSING.format(""))


class BackendUnavailable(UserError):
    """The server could not be reached, or answered badly, on every try."""


class MalformedResponse(ValueError):
    """The server answered, but not with the completions the request asked for."""


class OpenAIBackend:
    """``base_url``: the server's API root (``http://127.0.0.1:8000/v1``); ``model_name``: the model as the
    server names it; ``tokenizer``: that model's HF tokenizer (decodes responses, knows the eos id).

    ``retries`` extra tries after a failure, waiting ``backoff`` s, then twice as long each time. A request
    carries at most ``max_batch_size`` prompts.
    """

    max_batch_size = 256

    def __init__(self, base_url: str, model_name: str, tokenizer, *, api_key: str | None = None,
                 timeout: float = 120.0, retries: int = 3, backoff: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep):
        try:
            import openai  # optional dependency (pip install creditflow[openai])
        except ImportError as exc:
            raise UserError(MISSING.format(f" ({exc})")) from None
        self._openai = openai
        self.base_url = base_url
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        # our own retry loop (below) decides what is retried; the client's is switched off
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout, max_retries=0)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            out.extend(self._with_retries(prompts[start:start + self.max_batch_size], params))
        return out

    def _with_retries(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        openai = self._openai
        wait = self.backoff
        for attempt in range(self.retries + 1):
            try:
                return self._request(prompts, params)
            except openai.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                    raise UserError(f"OpenAI-compatible server at {self.base_url} refused the request "
                                    f"(HTTP {exc.status_code}: {_first_line(exc.message)})") from None
                problem = f"HTTP {exc.status_code}"
            except openai.APITimeoutError:
                problem = "timed out"
            except openai.APIConnectionError as exc:
                problem = f"cannot connect ({_first_line(str(exc.__cause__ or exc))})"
            except (openai.APIResponseValidationError, json.JSONDecodeError, MalformedResponse) as exc:
                problem = f"malformed response ({_first_line(str(exc))})"
            if attempt < self.retries:
                self._sleep(wait)
                wait *= 2
        raise BackendUnavailable(f"OpenAI-compatible server at {self.base_url}: {problem}, "
                                 f"{self.retries + 1} tries")

    def _request(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        greedy = params.temperature <= 0
        tok = self.tokenizer
        response = self.client.completions.create(
            model=self.model_name,
            prompt=[list(p) for p in prompts],
            max_tokens=params.max_new_tokens,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            logprobs=1,
            extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True, "top_k": 0,
                        "stop_token_ids": [tok.eos_token_id, *params.stop_token_ids],
                        "skip_special_tokens": False},
        )
        data = response.model_dump() if hasattr(response, "model_dump") else response
        return [self._generation(choice) for choice in _choices(data, len(prompts))]

    def _generation(self, choice: dict) -> Generation:
        logprobs = choice.get("logprobs") or {}
        values = logprobs.get("token_logprobs")
        token_ids = choice.get("token_ids")
        if token_ids is None:  # servers without return_token_ids: "token_id:N" tokens
            token_ids = [_token_id(t) for t in logprobs.get("tokens") or []]
        if not isinstance(values, list) or len(values) != len(token_ids):
            raise MalformedResponse("no per-token log-probs matching the sampled tokens")
        tok = self.tokenizer
        shown = token_ids[:-1] if token_ids and token_ids[-1] == tok.eos_token_id else token_ids
        return Generation(text=tok.decode(shown, skip_special_tokens=False), token_ids=[int(t) for t in token_ids],
                          logprobs=[float(v) for v in values])


def _choices(data, n: int) -> list[dict]:
    """The ``n`` choices of a completions answer, in prompt order."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != n or not all(isinstance(c, dict) for c in choices):
        raise MalformedResponse(f"expected {n} completion choices")
    return sorted(choices, key=lambda c: c.get("index") or 0)


def _token_id(token: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise MalformedResponse("the server returned no token ids (it needs return_token_ids or "
                                "return_tokens_as_token_ids, as vLLM and SGLang have)")
    return int(token.removeprefix("token_id:"))


def _first_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:200] if lines else "no detail"
