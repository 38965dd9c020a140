"""A complete rollout loop: an OpenAI-compatible chat endpoint for the model, toolserver for the tools.

Each trajectory uploads its image once (a toolserver session), then alternates model turns and tool turns
until the model answers or `--max-turns` is reached:

- structured `tool_calls` (OpenAI function calling): run with `session.run_tool_calls`, whose messages are
  appended as they are (tool messages, then one user message with the images);
- tool calls written in the text (Hermes `<tool_call>`, Groundlight `<tool>`, Mags-RL `<zoom>`, MGPO's fenced
  JSON, Mini-o3 `<grounding>`, DeepEyes' and Pixel-Reasoner's turns): run with `session.act`, whose
  observation is appended the way that system renders it. A malformed call comes back as an error text the
  model can read and fix.

Against the scripted stand-in model (`python examples/scripted_model.py --port 8001`, a script for every
`--format`):

    python examples/rollout.py --model-url http://127.0.0.1:8001/v1 --format hermes --image photo.jpg

With a real model, pass its endpoint, `--model` name and `--api-key`. A failure outside the loop (the model's
or toolserver's error answer, no connection) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import mimetypes
import sys
import time
from pathlib import Path
from typing import Any

import openai
from openai import AsyncOpenAI

from toolserver.client import AsyncClient, ToolServerError
from toolserver.formats import FORMATS
from toolserver.plugins import load_plugins
from toolserver.profiles import PROFILES


def profile_for(call_format: str) -> str:
    """The profile a call format is served by: the first registered profile (plugins' included) that reads its
    calls in that format, else `default`."""
    load_plugins()
    return next((name for name, profile in PROFILES.items() if profile.format.name == call_format), "default")


def image_message(path: Path, question: str) -> dict[str, Any]:
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    uri = f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                        {"type": "text", "text": question}]}


async def trajectory(llm: AsyncOpenAI, tools: AsyncClient, args: argparse.Namespace,
                     tool_specs: list[dict] | None) -> dict[str, Any]:
    parser = None if args.format == "openai" else args.format  # OpenAI tool_calls, or a format `act` reads
    profile = args.profile or ("default" if parser is None else profile_for(parser))
    stats: dict[str, Any] = {"calls": 0, "ok": 0, "images": 0, "errors": [], "answer": None, "turns": 0}
    async with await tools.create_session([args.image], profile=profile) as session:
        messages: list[dict[str, Any]] = [image_message(args.image, args.question)]
        for _ in range(args.max_turns):
            stats["turns"] += 1
            completion = await llm.chat.completions.create(model=args.model, messages=messages,
                                                           **({"tools": tool_specs} if tool_specs else {}))
            message = completion.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            text = message.content or ""
            if "<answer>" in text:
                stats["answer"] = text.split("<answer>", 1)[1].split("</answer>", 1)[0].strip()
                break
            if message.tool_calls:
                reply = await session.run_tool_calls(message.tool_calls, image_message="user")
                messages += reply.messages
                results = reply.results
            elif parser is not None:
                acted = await session.act(text, format=parser)
                if acted.done:  # the environment ends the episode (no call in the text)
                    stats["answer"] = text.strip()
                    break
                messages += acted.observation
                results = acted.results
            else:
                break  # plain text without tool calls: the model is done
            stats["calls"] += len(results)
            stats["ok"] += sum(r.ok for r in results)
            stats["images"] += sum(len(r.images) for r in results)
            stats["errors"] += [r.text for r in results if not r.ok]
    return stats


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    llm = AsyncOpenAI(base_url=args.model_url, api_key=args.api_key, timeout=args.timeout)
    async with AsyncClient(args.toolserver, api_key=args.toolserver_key, timeout=args.timeout) as tools:
        specs = await tools.list_tools(args.profile or "default") if args.format == "openai" else None
        return await asyncio.gather(*(trajectory(llm, tools, args, specs) for _ in range(args.trajectories)))


def failure(exc: Exception, args: argparse.Namespace) -> str:
    """What went wrong, in one line a user can act on (instead of a traceback)."""
    if isinstance(exc, openai.APIStatusError):
        detail = exc.body.get("detail", exc.message) if isinstance(exc.body, dict) else exc.message
        hint = (f"; the scripted model scripts no format {args.format!r} (pass --model for a real model)"
                if exc.status_code == 404 and args.model == f"scripted-{args.format}" else "")
        return f"the model at {args.model_url} answered {exc.status_code} for model {args.model!r}: {detail}{hint}"
    if isinstance(exc, openai.APIConnectionError):
        return f"no model answers at {args.model_url} ({exc.message}); start one, e.g. examples/scripted_model.py"
    if isinstance(exc, ToolServerError):
        return f"toolserver at {args.toolserver}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    load_plugins()  # plugins' formats are offered too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolserver", default="http://127.0.0.1:8000")
    parser.add_argument("--toolserver-key", default=None)
    parser.add_argument("--model-url", default="http://127.0.0.1:8001/v1")
    parser.add_argument("--model", default=None, help="default: scripted-<format>")
    parser.add_argument("--api-key", default="not-needed")
    parser.add_argument("--format", choices=["openai", *FORMATS], default="openai",
                        help="openai: structured tool_calls; else a call format in the text, read by /act")
    parser.add_argument("--profile", default=None, help="default: the profile that uses the format")
    parser.add_argument("--image", type=Path, required=True)
    parser.add_argument("--question", default="What does the small sign say?")
    parser.add_argument("--trajectories", type=int, default=1)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    args.model = args.model or f"scripted-{args.format}"

    if not args.image.is_file():
        parser.error(f"--image {args.image}: no such file")
    started = time.perf_counter()
    try:
        results = asyncio.run(run(args))
    except (openai.OpenAIError, ToolServerError, OSError) as exc:
        print(f"rollout failed: {failure(exc, args)}", file=sys.stderr)
        return 2
    summary = {
        "format": args.format, "trajectories": len(results), "seconds": round(time.perf_counter() - started, 2),
        "tool_calls": sum(r["calls"] for r in results), "ok": sum(r["ok"] for r in results),
        "images": sum(r["images"] for r in results),
        "answered": sum(r["answer"] is not None for r in results),
        "first_errors": sorted({e.splitlines()[0][:160] for r in results for e in r["errors"]})[:5],
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["answered"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
