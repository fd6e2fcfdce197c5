"""The peer for `cargo bench --bench llama`: the official `openai` Python SDK
doing the same 30-turn conversation against the same llama-server.

Prints one JSON object: per turn, the wall time of the streamed request, the
server's own processing time (its `timings`), and the cached prompt tokens.
"""
import json
import sys
import time

from openai import OpenAI

base_url, turns = sys.argv[1], int(sys.argv[2])
client = OpenAI(base_url=base_url, api_key="none", max_retries=4)
messages = [{"role": "system", "content": "You answer in one short sentence."}]
rows = []
for turn in range(turns):
    messages.append({"role": "user", "content": f"Tell me one fact about the number {turn}."})
    started = time.perf_counter()
    stream = client.chat.completions.create(
        model="smollm2",
        messages=messages,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, server_ms, cached, prompt = "", 0.0, 0, 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        timings = (chunk.model_extra or {}).get("timings")
        if timings:
            server_ms = timings["prompt_ms"] + timings["predicted_ms"]
            cached = timings.get("cache_n", 0)
        if chunk.usage:
            prompt = chunk.usage.prompt_tokens
    rows.append({
        "total_ms": (time.perf_counter() - started) * 1000,
        "server_ms": server_ms,
        "cached": cached,
        "prompt": prompt,
    })
    messages.append({"role": "assistant", "content": text})
print(json.dumps({"openai": __import__("openai").__version__, "turns": rows}))
