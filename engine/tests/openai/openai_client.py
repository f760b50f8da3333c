"""Drives an Aquila server with the official `openai` client and writes what it got as JSON.

Usage: python openai_client.py BASE_URL MODEL CASES_JSON OUTPUT_JSON

CASES_JSON holds {"completions": [prompt, ...], "chats": [[message, ...], ...],
"max_tokens": N}. For every prompt and every conversation the script asks once without and
once with streaming (greedy), and records the text, the concatenated stream deltas, the finish
reasons and the usage; it also records the model list and the status codes of two bad requests.
The Rust test `server_openai` starts the server, runs this script and checks the output.
"""

import json
import sys

import openai


def completion_case(client, model, prompt, max_tokens):
    whole = client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0
    )
    deltas, stream_finish, stream_usage = [], None, None
    for chunk in client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for choice in chunk.choices:
            deltas.append(choice.text)
            stream_finish = choice.finish_reason or stream_finish
        if chunk.usage is not None:
            stream_usage = chunk.usage.model_dump()
    return {
        "text": whole.choices[0].text,
        "finish_reason": whole.choices[0].finish_reason,
        "usage": whole.usage.model_dump(),
        "stream_text": "".join(deltas),
        "stream_chunks": len(deltas),
        "stream_finish_reason": stream_finish,
        "stream_usage": stream_usage,
    }


def chat_case(client, model, messages, max_tokens):
    whole = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0
    )
    deltas, stream_finish, roles = [], None, []
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, stream=True
    ):
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                deltas.append(choice.delta.content)
            stream_finish = choice.finish_reason or stream_finish
    return {
        "text": whole.choices[0].message.content,
        "role": whole.choices[0].message.role,
        "finish_reason": whole.choices[0].finish_reason,
        "usage": whole.usage.model_dump(),
        "stream_text": "".join(deltas),
        "stream_chunks": len(deltas),
        "stream_roles": roles,
        "stream_finish_reason": stream_finish,
    }


def error_status(call):
    try:
        call()
    except openai.APIStatusError as error:
        return {"status": error.status_code, "message": str(error)}
    return {"status": 200, "message": ""}


def main():
    base_url, model, cases_path, output_path = sys.argv[1:5]
    with open(cases_path) as f:
        cases = json.load(f)
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300)
    max_tokens = cases["max_tokens"]
    result = {
        "openai_version": openai.__version__,
        "models": [m.id for m in client.models.list().data],
        "completions": [
            completion_case(client, model, prompt, max_tokens) for prompt in cases["completions"]
        ],
        "chats": [chat_case(client, model, messages, max_tokens) for messages in cases["chats"]],
        "unknown_model": error_status(
            lambda: client.completions.create(model="no-such-model", prompt="hi", max_tokens=2)
        ),
        "bad_temperature": error_status(
            lambda: client.completions.create(
                model=model, prompt="hi", max_tokens=2, temperature=-1
            )
        ),
    }
    with open(output_path, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
