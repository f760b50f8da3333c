#!/usr/bin/env python3
"""Reference dequantizations from gguf-py, llama.cpp's own Python package, for Aquila's tests.

For every GGML type, writes random blocks and gguf-py's f32 values of them:

    OUT/NAME.blocks   N blocks of raw bytes
    OUT/NAME.f32      the N * block_size values, little-endian f32
    OUT/manifest.json {"gguf": version, "numpy": version, "blocks": N,
                       "dequantized": [NAME...], "not_dequantized": [NAME...]}

Random bytes are valid blocks of every type except where a scale decodes to an infinity or
NaN; blocks whose values are not all finite are dropped (more are drawn than kept).

The script runs itself in a virtual environment at --venv with pinned gguf and numpy,
creating it on first use (needs pip and access to PyPI once).
"""

import argparse
import json
import os
import subprocess
import sys
import venv

GGUF_VERSION = "0.19.0"
NUMPY_VERSION = "2.4.6"
# Blocks drawn per block kept: enough that dropping non-finite ones still leaves N.
DRAW_FACTOR = 4


def in_venv(venv_dir: str) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv_dir)


def ensure_venv(venv_dir: str) -> str:
    """Creates the virtual environment with the pinned packages once; returns its python."""
    python = os.path.join(venv_dir, "bin", "python")
    marker = os.path.join(venv_dir, f"aquila-gguf-{GGUF_VERSION}-numpy-{NUMPY_VERSION}")
    if os.path.exists(marker):
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         f"gguf=={GGUF_VERSION}", f"numpy=={NUMPY_VERSION}"],
        check=True,
    )
    open(marker, "w").close()
    return python


def write_references(out_dir: str, blocks: int, seed: int) -> None:
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    os.makedirs(out_dir, exist_ok=True)
    dequantized, not_dequantized = [], []
    for qtype in GGMLQuantizationType:
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        rng = np.random.default_rng(seed + int(qtype))
        data = rng.integers(0, 256, size=(blocks * DRAW_FACTOR, type_size), dtype=np.uint8)
        try:
            # Non-finite scales overflow or make NaNs: those blocks are dropped below.
            with np.errstate(all="ignore"):
                values = dequantize(data, qtype)
        except NotImplementedError:
            not_dequantized.append(qtype.name)
            continue
        values = np.asarray(values, dtype=np.float32).reshape((-1, block_size))
        finite = np.isfinite(values).all(axis=1)
        if finite.sum() < blocks:
            sys.exit(f"{qtype.name}: only {finite.sum()} of {len(finite)} random blocks are finite")
        keep = np.flatnonzero(finite)[:blocks]
        data[keep].tofile(os.path.join(out_dir, f"{qtype.name}.blocks"))
        values[keep].astype("<f4").tofile(os.path.join(out_dir, f"{qtype.name}.f32"))
        dequantized.append(qtype.name)
    manifest = {
        "gguf": GGUF_VERSION,
        "numpy": np.__version__,
        "blocks": blocks,
        "dequantized": dequantized,
        "not_dequantized": not_dequantized,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, help="virtual environment directory")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--blocks", type=int, default=64, help="blocks per type")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    if not in_venv(args.venv):
        python = ensure_venv(args.venv)
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])
    write_references(args.out, args.blocks, args.seed)


if __name__ == "__main__":
    main()
