"""agents_sdk_loop.py: a real agent loop, the OpenAI Agents SDK
(`openai-agents` on PyPI) with a function tool, against a running pagoda
server: Runner.run makes the model call the tool (tool_choice required:
the constraint holds the call, so it parses), runs the Python function,
sends its result back and gets the model's answer; once over the Responses
API (the SDK's default model class) and once over chat completions
(OpenAIChatCompletionsModel), once streamed (Runner.run_streamed). Checks
that the tool ran with arguments valid for its signature and that the run
ended with a text answer. Tracing is off (it would post to OpenAI).
Not for: starting the server (agents_client.sh).

usage: python agents_sdk_loop.py BASE_URL API_KEY
"""
import asyncio
import sys

from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from integ_check import check, failures
from openai import AsyncOpenAI

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name.
    """
    calls.append(city)
    return f"The weather in {city} is sunny, 22C."


def agent(model):
    # required: the first model call is a call; the SDK then resets
    # tool_choice (reset_tool_choice) so the next one can answer in text
    return Agent(name="weather", instructions="You are a helpful assistant. Answer briefly.", model=model,
                 tools=[get_weather], model_settings=ModelSettings(tool_choice="required", temperature=0,
                                                                   max_tokens=100, parallel_tool_calls=False))


def check_run(label, result, n_before):
    got = calls[n_before:]
    check(len(got) >= 1 and all(isinstance(c, str) and c for c in got), f"{label}: the tool ran: {got}")
    kinds = [i.type for i in result.new_items]
    check("tool_call_item" in kinds and "tool_call_output_item" in kinds, f"{label}: items {kinds}")
    check(isinstance(result.final_output, str) and result.final_output.strip(),
          f"{label}: a text answer {result.final_output!r}")
    print(f"{label}: tool called with {got}, answer {result.final_output!r}")


async def main():
    base_url, key = sys.argv[1], sys.argv[2]
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=300)
    q = "What is the weather in Paris?"

    n = len(calls)
    r = await Runner.run(agent(OpenAIResponsesModel(model="pagoda", openai_client=client)), q, max_turns=4)
    check_run("responses", r, n)

    n = len(calls)
    r = await Runner.run(agent(OpenAIChatCompletionsModel(model="pagoda", openai_client=client)), q, max_turns=4)
    check_run("chat completions", r, n)

    n = len(calls)
    s = Runner.run_streamed(agent(OpenAIResponsesModel(model="pagoda", openai_client=client)), q, max_turns=4)
    kinds = set()
    async for ev in s.stream_events():
        kinds.add(ev.type)
    check("raw_response_event" in kinds and "run_item_stream_event" in kinds, f"streamed events {kinds}")
    check_run("responses streamed", s, n)

    print(f"agents_sdk_loop.py: {'ok' if failures() == 0 else f'{failures()} failures'}")
    return 1 if failures() else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
