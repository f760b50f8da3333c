#!/usr/bin/env bash
# Aquila's GPU check, unpacked from the `cargo xtask gpu-check` bundle: needs an NVIDIA GPU
# with its driver and CUDA runtime, Python 3 and PyTorch; no Rust toolchain, no network.
#
#   ./run.sh              parity, then SmolLM2-shaped and Llama-3-8B-shaped benchmarks
#   SKIP_8B=1 ./run.sh    without the Llama-3-8B-shaped model (16 GB of bf16 weights)
#   WORK=DIR ./run.sh     where the random models go (default: ./work)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/bin"
work="${WORK:-$here/work}"
device="${DEVICE:-cuda:0}"
mkdir -p "$work"

# burn's CUDA backend compiles kernels with NVRTC at run time: take PyTorch's copy when the
# system has none on the library path.
nvrtc_dir="$(python3 - <<'PY' 2>/dev/null || true
import glob, os
try:
    import nvidia.cuda_nvrtc as m
    print(os.path.join(os.path.dirname(m.__file__), "lib"))
except Exception:
    import torch
    print(os.path.join(os.path.dirname(torch.__file__), "lib"))
PY
)"
if [ -n "$nvrtc_dir" ]; then
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nvrtc_dir"
fi

step() { printf '\n=== %s\n' "$*"; }

step "GPU"
nvidia-smi -L || true

step "parity of $device with the CPU kernels on tiny fixtures (f32)"
"$bin/gpu-check" parity --device "$device"

smollm2="$work/smollm2-random"
step "random SmolLM2-135M-shaped model (f32)"
[ -f "$smollm2/model.safetensors" ] ||
    python3 "$here/random_model.py" --shape smollm2 --dtype f32 --out "$smollm2" \
        --tokenizer-dir "$here/tokenizer"
"$bin/gpu-check" parity --device "$device" --model "$smollm2"
"$bin/gpu-check" parity --device "$device" --dtype bf16 --model "$smollm2"
"$bin/gpu-check" heads --model "$smollm2" --out "$work/smollm2-heads"

step "SmolLM2 shape: decode and prefill tokens/s ($device, f32)"
"$bin/bench" --model "$smollm2" --device "$device"

for seqs in 1 8; do
    step "SmolLM2 shape: verification cost and EAGLE speedup, batch $seqs ($device, f32)"
    "$bin/bench-spec" --model "$smollm2" --device "$device" \
        --draft "$work/smollm2-heads/eagle1" --draft-eagle3 "$work/smollm2-heads/eagle3" \
        --num-prompts 8 --max-num-seqs "$seqs" --max-tokens 48
done

if [ "${SKIP_8B:-0}" = 1 ]; then
    exit 0
fi
llama="$work/llama3-8b-random"
step "random Llama-3-8B-shaped model (bf16)"
[ -f "$llama/model.safetensors" ] ||
    python3 "$here/random_model.py" --shape llama3-8b --dtype bf16 --out "$llama" \
        --tokenizer-dir "$here/tokenizer"
"$bin/gpu-check" heads --model "$llama" --out "$work/llama3-8b-heads"

step "Llama-3-8B shape: decode and prefill tokens/s ($device, bf16)"
"$bin/bench" --model "$llama" --device "$device" --dtype bf16 --repeats 2

for seqs in 1 8; do
    step "Llama-3-8B shape: verification cost and EAGLE speedup, batch $seqs ($device, bf16)"
    "$bin/bench-spec" --model "$llama" --device "$device" --dtype bf16 \
        --draft "$work/llama3-8b-heads/eagle1" --draft-eagle3 "$work/llama3-8b-heads/eagle3" \
        --num-prompts 8 --max-num-seqs "$seqs" --max-tokens 32 --repeats 5
done
