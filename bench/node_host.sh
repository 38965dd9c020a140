#!/usr/bin/env bash
# Issue #41's figures on a GPU host in one short booking: the node benchmark and its limits, offline.
#
#   bash bench/node_host.sh prepare       # here (PyPI and Debian's redis-server reachable): fills .node/ (~50 MB)
#   bash bench/node_host.sh run [SECONDS]  # there, with .node/ carried: installs the wheels offline, puts the
#                                          # carried redis-server on PATH, then runs the benches, each bounded so that
#                                          # the whole run ends within SECONDS (default 540); results under $OUT
#
# .node/ holds what a GPU image with PyTorch lacks: the wheels of bench/node_host_requirements.txt (CPython 3.12,
# manylinux x86-64) and py-spy, Debian's redis-server with the libraries it links (started through a wrapper that
# sets LD_LIBRARY_PATH for it alone), and a copy of the shared photographs. Add `/.node/` to .git/info/exclude.
set -uo pipefail
cd "$(dirname "$0")/.."
NODE=$(realpath -m "${NODE_HOST_DIR:-.node}")  # NODE_HOST_DIR: another copy (a rehearsal here)

prepare() {
    local platforms=()
    for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
             manylinux_2_12 manylinux_2_5 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
    rm -rf "$NODE" && mkdir -p "$NODE/whl" "$NODE/bin" "$NODE/redis/lib" "$NODE/photos"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d "$NODE/whl" -r bench/node_host_requirements.txt py-spy==0.4.3 || return 1
    local redis
    redis=$(readlink -f "$(command -v redis-server)") || { echo "redis-server is not installed here" >&2; return 1; }
    cp "$redis" "$NODE/redis/redis-server.bin"
    # Every library it links except the C library itself (the host's, which is newer than the one it was built on)
    ldd "$redis" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|ld-linux[^/]*)\.so' | xargs -I{} cp -L {} "$NODE/redis/lib/"
    printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/../redis\nLD_LIBRARY_PATH="$d/lib" exec "$d/redis-server.bin" "$@"\n' \
        > "$NODE/bin/redis-server"
    chmod +x "$NODE/bin/redis-server"
    cp ../shared/data/photos/* "$NODE/photos/"
    du -sh "$NODE"
}

run() {
    local budget=${1:-540} start=$SECONDS out=${OUT:-/tmp/node-host-out}
    mkdir -p "$out"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$NODE"/whl/*.whl || return 1
    export PYTHONPATH="/tmp/site:$PWD" PATH="$NODE/bin:/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
        TOOLSERVER_BENCH_PHOTOS="$NODE/photos"
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        nproc && free -g | head -2
        redis-server --version
        python3 -c "import sys, torch, PIL, numpy, toolserver.api.app; print(sys.version.split()[0], 'torch', \
torch.__version__, 'cuda', torch.cuda.is_available(), 'pillow', PIL.__version__, 'numpy', numpy.__version__)"
    } > "$out/host.txt" 2>&1
    local ready=$?
    cat "$out/host.txt"
    ((ready == 0)) || { echo "the server's packages do not import here: no bench run" >&2; return 1; }
    stage() {  # name, the least seconds worth starting it with, command...
        local name=$1 need=$2 left
        shift 2
        left=$((budget - (SECONDS - start) - 5))
        if ((left < need)); then echo "$name: skipped, $left s left"; return; fi
        timeout -k 5 "$left" "$@" > "$out/$name.log" 2>&1
        echo "$name: rc $? at $((SECONDS - start)) s"
    }
    # NODE_BENCH_ARGS: bench_node's options (default --sr; e.g. a rehearsal's smaller loads, or the zoom_in rows
    # alone); NODE_HOST_STAGES: which stages run (default node sr_front sr_http perception; also sr_prof, ab)
    local stages=" ${NODE_HOST_STAGES:-node sr_front sr_http perception} "
    # shellcheck disable=SC2086
    local profile=(--profile "$out/profile.txt")  # NODE_PROFILE=0: no py-spy profile of the node (saves ~20 s)
    [[ ${NODE_PROFILE:-1} == 0 ]] && profile=()
    [[ $stages == *" node "* ]] && stage node 90 python3 -m bench.bench_node --out "$out/node.json" \
        "${profile[@]}" ${NODE_BENCH_ARGS:---sr}
    [[ $stages == *" sr_front "* ]] && stage sr_front 60 python3 -m bench.bench_sr_front --device cuda \
        --json "$out/sr_front.json"
    # sr_prof: py-spy's native samples of every thread under the in-process front (where the GPU worker waits)
    [[ $stages == *" sr_prof "* ]] && stage sr_prof 40 py-spy record --native --threads --idle --rate 100 --format raw \
        -o "$out/sr_front_profile.txt" -- python3 -m bench.bench_sr_front --device cuda --rows 1 --calls 24 \
        --json "$out/sr_prof.json"
    # ab: the N-worker zoom_in row from this checkout and from the one at NODE_AB_TREE (a server tree, e.g.
    # `git archive <commit> toolserver | tar -x -C .node/before`), alternately, two pairs
    if [[ $stages == *" ab "* && -n ${NODE_AB_TREE:-} ]]; then
        local i side
        for i in 1 2; do
            for side in before now; do
                if [[ $side == before ]]; then export TOOLSERVER_BENCH_SERVER_TREE=$(realpath "$NODE_AB_TREE"); fi
                stage "ab_${side}_$i" 40 python3 -m bench.bench_node --node-only --sessions 128 \
                    --calls "${NODE_AB_CALLS:-48}" --out "$out/ab_${side}_$i.json"
                unset TOOLSERVER_BENCH_SERVER_TREE
            done
        done
    fi
    [[ $stages == *" sr_http "* ]] && stage sr_http 100 python3 -m bench.bench_sr_http --side 256 --calls 6 \
        --encode-processes 0 auto --json "$out/sr_http.json"
    [[ $stages == *" perception "* ]] && stage perception 60 python3 -m bench.bench_perception_models \
        --device cuda --size full --json "$out/perception.json"
    [[ -f $out/node.json ]] && python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({k: \
d.get(k) for k in ('cores', 'workers', 'zoom_in_ratios', 'super_resolution_ratios')}))" "$out/node.json"
    # The device returns at most 8 files of $OUT: everything but host.txt goes into results.tgz (NODE_PACK=0: not)
    if [[ ${NODE_PACK:-1} != 0 ]]; then
        (cd "$out" && find . -maxdepth 1 -type f ! -name host.txt ! -name results.tgz -printf '%P\n' \
            | tar -czf results.tgz -T - && find . -maxdepth 1 -type f ! -name host.txt ! -name results.tgz -delete)
    fi
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) echo "usage: bash bench/node_host.sh prepare | run [SECONDS]" >&2; exit 2 ;;
esac
