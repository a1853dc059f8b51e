#!/usr/bin/env bash
# Install vLLM 0.9.2's host-side Python (scheduler, block manager, output processor,
# speculative-decoding bookkeeping) into its own venv on a CPU-only machine, plus psdsim,
# so benchmarks/vllm_v0_host.py and tests/engine/test_vllm_v0_conformance.py can import both.
# Nothing here enters psdsim's own dependencies.
#
# Usage: benchmarks/install_vllm_v0_host.sh [VENV_DIR]   (default /work/venv-vllm092)
set -euo pipefail

venv_dir="${1:-/work/venv-vllm092}"
repo_dir="$(cd "$(dirname "$0")/.." && pwd)"

python3 -m venv "$venv_dir"
# shellcheck disable=SC1091
. "$venv_dir/bin/activate"
python -m pip install --upgrade pip

# 1. torch: the CPU wheel (a plain `pip install torch` pulls ~4 GB of CUDA libraries).
python -m pip install torch==2.13.0 || python -m pip install torch --index-url https://download.pytorch.org/whl/cpu

# 2. vLLM without its pinned dependencies (they pin torch 2.7.0 and xgrammar, which the
#    host-side modules never load).
python -m pip install --no-deps vllm==0.9.2

# 3. The pure-Python packages `import vllm.core.scheduler` and the output processor ask for.
python -m pip install numpy "transformers<4.54" pydantic msgspec cloudpickle psutil \
    sentencepiece cachetools fastapi prometheus_client pyzmq tqdm requests blake3 gguf \
    pyyaml einops pillow pybase64

# 4. psdsim itself, so one interpreter imports both.
python -m pip install --no-deps -e "$repo_dir"
python -m pip install simpy numpy scipy matplotlib pytest hypothesis

python -c "import vllm, psdsim; print('vllm', vllm.__version__, 'and psdsim import')"
