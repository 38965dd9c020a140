"""verl-tool's own tool server (TIGER-AI-Lab/verl-tool @ 980962b), run next to this project for side-by-side
benchmarks and recorded exchanges. Set up with bench/verl_tool/setup.sh; start it with
bench.verl_tool.launch.VerlToolServer (stdlib only, importable from this project's venv)."""
