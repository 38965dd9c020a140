"""Command line: `toolserver serve`, `ingest`, `documents`, `weights`, `openapi`, `selfcheck`."""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import sys
from pathlib import Path
from typing import Any

from toolserver.config import Settings


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items()
                 if k in Settings.model_fields and v is not None}
    return Settings(**overrides)


def _workers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a number or `auto`, not {value!r}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from toolserver.allocator import limit_malloc_arenas
    from toolserver.logs import configure_logging
    from toolserver.node import NodeError, plan_workers, run_node

    settings = _settings(args)
    configure_logging(settings.log_format, settings.log_level)
    limit_malloc_arenas()  # before any thread, in one process and in the node's forked workers alike
    try:
        n, warning = plan_workers(settings)
    except NodeError as exc:
        print(f"toolserver serve: {exc}", file=sys.stderr)
        return 2
    if warning:
        print(f"toolserver serve: {warning}", file=sys.stderr)
    if n == 1:
        return serve_process(settings.model_copy(update={"workers": 1}))
    import toolserver.api  # noqa: F401  # imported once here, so that the forked workers share its pages

    try:
        return run_node(settings, n, lambda s, sock, _index: serve_process(s, sock))
    except NodeError as exc:
        print(f"toolserver serve: {exc}", file=sys.stderr)
        return 2


def serve_process(settings: Settings, sock: Any = None) -> int:
    """One server process: the app under uvicorn (on `sock` when a node supervisor bound the port for it)."""
    import uvicorn

    from toolserver.api import create_app
    from toolserver.core.wiring import settle_process
    from toolserver.logs import logging_config
    from toolserver.node.handoff import is_handoff
    from toolserver.plugins import PluginError
    from toolserver.sandbox.budget import SandboxBudgetError
    from toolserver.serving import DrainingServer

    level = settings.log_level
    try:
        app = create_app(settings)
    except (PluginError, SandboxBudgetError) as exc:  # a broken environment or an unkeepable promise stops it
        print(f"toolserver serve: {exc}", file=sys.stderr)
        return 2
    settle_process(settings)  # the collector and Pillow's memory, as a server wants them
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=logging_config(
        settings.log_format, level), log_level=level, access_log=False,
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s)), timeout_keep_alive=settings.keep_alive_s,
        # OpenEnv's WebSocket: messages up to twice its limit are read and answered (VALIDATION_ERROR); larger ones
        # are refused by the WebSocket layer itself (close code 1009) without being read.
        ws_max_size=2 * settings.openenv_max_message_bytes)
    handoff = sock if sock is not None and is_handoff(sock) else None
    DrainingServer(config, app.state.gate, grace_s=settings.shutdown_grace_s, handoff=handoff).run(
        sockets=None if sock is None or handoff is not None else [sock])
    return 0


def openapi_document() -> dict:
    from toolserver.api import create_app

    return create_app(Settings()).openapi()


def cmd_openapi(args: argparse.Namespace) -> int:
    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


def cmd_selfcheck(_args: argparse.Namespace) -> int:
    """Create a session with a generated image, zoom into it, release it: the whole path in-process."""
    from PIL import Image

    from toolserver.core import Core
    from toolserver.models import CreateSessionRequest, ImageInput

    async def run() -> int:
        core = Core(Settings())
        buf = io.BytesIO()
        Image.new("RGB", (640, 480), (30, 120, 200)).save(buf, format="PNG")
        created = await core.create_session(CreateSessionRequest(
            images=[ImageInput(data=base64.b64encode(buf.getvalue()).decode())]))
        result = await core.call_tool(created.session_id, "zoom_in",
                                      {"image": "original_image", "bbox_2d": [250, 250, 750, 750]})
        await core.release(created.session_id)
        await core.stop()
        ok = result.ok and result.images and (result.images[0].width, result.images[0].height) == (320, 240)
        print(("selfcheck ok: " if ok else "selfcheck FAILED: ") + result.text)
        return 0 if ok else 1

    return asyncio.run(run())


def cmd_weights(args: argparse.Namespace) -> int:
    """List the known SMFANet checkpoints and what is installed, or download them (verifying sha256)."""
    from toolserver.sr.checkpoints import MANIFEST, CheckpointError, download, scan

    model_dir = args.dir or Settings().sr_model_dir
    if args.action == "download":
        names = args.names or [c.name for c in MANIFEST]
        try:
            download(names, model_dir, url_template=args.url_template, progress=print)
        except CheckpointError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    installed = {c.known.name: c for c in scan(model_dir)}
    print(f"model directory: {model_dir.resolve()}")
    for known in MANIFEST:
        found = installed.get(known.name)
        state = "missing" if found is None else (f"INVALID: {found.problem}" if found.problem else "ok")
        print(f"  {known.name:16} x{known.scale} {known.variant:13} {known.file:34} {state}")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest PDFs or page-image folders into the library, with a progress bar; resumes partial ones.

    With the embedded store this process must be the only one using the documents directory (stop the
    server, or ingest through `POST /v1/documents`); with a Chroma server any process may ingest.
    """
    from tqdm import tqdm

    from toolserver.core import build_library
    from toolserver.documents.sources import DocumentError, scan_image_folder

    library = build_library(_settings(args))
    print(f"rankings: {', '.join(library.rankings())}; library: {library.root.resolve()}", flush=True)
    failures = 0
    for path in args.paths:
        names: list[str | None] = [args.filename]
        if path.is_dir() and args.filename is None:
            names = [*sorted(scan_image_folder(path))] or [None]
        for name in names:
            try:
                document, source = library.open(path, name)
            except DocumentError as exc:
                print(f"error: {path}: {exc.message}", file=sys.stderr)
                failures += 1
                continue
            with tqdm(total=source.pages, desc=document, unit="page", disable=args.quiet) as bar:
                def advance(info, bar=bar):
                    bar.update(info.pages_done - bar.n)

                try:
                    info = library.ingest_source(document, source, advance)
                except DocumentError as exc:
                    print(f"error: {document}: {exc.message}", file=sys.stderr)
                    failures += 1
                    continue
                bar.update(info.pages_done - bar.n)
            state = "unchanged" if info.unchanged else info.status
            print(f"{document}: {state}, {info.pages_done}/{info.pages} pages, "
                  f"embedded: {', '.join(info.embedded) or 'none'}", flush=True)
    return 1 if failures else 0


def cmd_documents(args: argparse.Namespace) -> int:
    from toolserver.core import build_library
    from toolserver.documents.sources import DocumentError

    library = build_library(_settings(args))
    if args.action == "delete":
        for name in args.names:
            try:
                library.delete(name)
                print(f"deleted {name}")
            except DocumentError as exc:
                print(f"error: {exc.message}", file=sys.stderr)
                return 1
        return 0
    for doc in library.list():
        print(f"{doc.filename:40} {doc.status:9} {doc.pages_done:>6}/{doc.pages:<6} {doc.kind:7} "
              f"{','.join(doc.embedded)}")
    return 0


def cmd_openenv_package(args: argparse.Namespace) -> int:
    from toolserver.errors import ServiceError
    from toolserver.integrations.openenv_package import write_package

    try:
        written = write_package(args.profile, args.directory, url=args.url, concurrency=args.max_concurrent_envs)
    except ServiceError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    print(f"validate: openenv validate {args.directory} --skip-build; push: openenv push {args.directory}",
          file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolserver", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the HTTP server (settings also from TOOLSERVER_* variables)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir", dest="data_dir", type=Path)
    serve.add_argument("--output-dir", dest="output_dir", type=Path)
    serve.add_argument("--workers", type=_workers, help="server processes behind the port: a number or `auto` "
                       "(default: the host's cores, one below 4); several share sessions through a node-local store")
    serve.add_argument("--threads", type=int, help="threads for image work in each server process")
    serve.add_argument("--queue-limit", dest="queue_limit", type=int)
    serve.add_argument("--tool-timeout-s", dest="tool_timeout_s", type=float)
    serve.add_argument("--log-level", dest="log_level", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--log-format", dest="log_format", choices=["json", "text"])
    serve.set_defaults(func=cmd_serve)

    ingest = sub.add_parser("ingest", help="ingest PDFs or page-image folders into the document library")
    ingest.add_argument("paths", nargs="+", type=Path, help="PDF files or folders of {filename}_{page}.{ext} images")
    ingest.add_argument("--filename", help="document id (default: the PDF's stem; every document in a folder)")
    ingest.add_argument("--data-dir", dest="data_dir", type=Path)
    ingest.add_argument("--documents-dir", dest="documents_dir", type=Path)
    ingest.add_argument("--chroma-url", dest="chroma_url")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.set_defaults(func=cmd_ingest)

    documents = sub.add_parser("documents", help="list or delete documents in the library")
    documents.add_argument("action", choices=["list", "delete"])
    documents.add_argument("names", nargs="*")
    documents.add_argument("--data-dir", dest="data_dir", type=Path)
    documents.add_argument("--documents-dir", dest="documents_dir", type=Path)
    documents.add_argument("--chroma-url", dest="chroma_url")
    documents.set_defaults(func=cmd_documents)

    weights = sub.add_parser("weights", help="list or download the SMFANet checkpoints")
    weights.add_argument("action", choices=["list", "download"])
    weights.add_argument("names", nargs="*", help="checkpoint names (default: all), e.g. smfanet-x4")
    weights.add_argument("--dir", type=Path,
                         help="model directory (default: TOOLSERVER_SR_MODEL_DIR or the shipped toolserver/sr/smfanet)")
    weights.add_argument("--url-template", dest="url_template",
                         help="mirror URL with {file} in it (default: the official GitHub repository)")
    weights.set_defaults(func=cmd_weights)

    openapi = sub.add_parser("openapi", help="write the OpenAPI document")
    openapi.add_argument("--output", "-o", default="openapi/openapi.json")
    openapi.set_defaults(func=cmd_openapi)

    package = sub.add_parser("openenv-package", help="write a profile as an OpenEnv environment package (a Space "
                             "that forwards to a toolserver); see docs/openenv.md")
    package.add_argument("profile")
    package.add_argument("directory", type=Path)
    package.add_argument("--url", default="", help="the toolserver the Space forwards to (its TOOLSERVER_URL)")
    package.add_argument("--max-concurrent-envs", dest="max_concurrent_envs", type=int, default=64,
                         help="episodes the Space serves at once")
    package.set_defaults(func=cmd_openenv_package)

    selfcheck = sub.add_parser("selfcheck", help="run one zoom end to end in-process")
    selfcheck.set_defaults(func=cmd_selfcheck)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
