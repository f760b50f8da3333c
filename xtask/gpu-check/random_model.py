#!/usr/bin/env python3
"""Writes a Llama-family model of random weights in Hugging Face layout (config.json,
model.safetensors, the tokenizer files given) for the GPU check of the Aquila bundle.

Needs only Python 3 and PyTorch (the safetensors file is written directly). Weights are
drawn on the GPU when there is one: normal with standard deviation 0.02, norms at one.

    python3 random_model.py --shape smollm2 --out DIR --tokenizer-dir DIR [--dtype f32]
"""

import argparse
import json
import os
import shutil
import struct

import torch

SHAPES = {
    # SmolLM2-135M-Instruct.
    "smollm2": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    # Meta-Llama-3-8B.
    "llama3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}

DTYPES = {
    "f32": (torch.float32, "F32", "float32"),
    "bf16": (torch.bfloat16, "BF16", "bfloat16"),
    "f16": (torch.float16, "F16", "float16"),
}


def tensor_shapes(c):
    """(name, shape, is_norm) of every tensor, in Hugging Face names."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    head_dim = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head_dim
    out = [("model.embed_tokens.weight", (v, h), False)]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        out += [
            (f"{p}.input_layernorm.weight", (h,), True),
            (f"{p}.self_attn.q_proj.weight", (h, h), False),
            (f"{p}.self_attn.k_proj.weight", (kv, h), False),
            (f"{p}.self_attn.v_proj.weight", (kv, h), False),
            (f"{p}.self_attn.o_proj.weight", (h, h), False),
            (f"{p}.post_attention_layernorm.weight", (h,), True),
            (f"{p}.mlp.gate_proj.weight", (i, h), False),
            (f"{p}.mlp.up_proj.weight", (i, h), False),
            (f"{p}.mlp.down_proj.weight", (h, i), False),
        ]
    out.append(("model.norm.weight", (h,), True))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, h), False))
    return out


def write_safetensors(path, shapes, dtype, seed):
    """Streams the tensors into one safetensors file, one tensor in memory at a time."""
    torch_dtype, st_dtype, _ = DTYPES[dtype]
    size = torch.tensor([], dtype=torch_dtype).element_size()
    header, offset = {}, 0
    for name, shape, _ in shapes:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + n * size]}
        offset += n * size
    header_bytes = json.dumps(header).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=device).manual_seed(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for name, shape, is_norm in shapes:
            if is_norm:
                t = torch.ones(shape, dtype=torch.float32, device=device)
            else:
                t = torch.randn(shape, generator=generator, dtype=torch.float32, device=device) * 0.02
            t = t.to(torch_dtype).cpu().contiguous()
            raw = t.view(torch.int16) if size == 2 else t
            f.write(raw.numpy().tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokenizer-dir", required=True, help="tokenizer.json and tokenizer_config.json")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    c = SHAPES[args.shape]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": DTYPES[args.dtype][2],
        **c,
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name))
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensor_shapes(c), args.dtype, args.seed)
    print(f"random {args.shape} ({args.dtype}) written to {args.out}")


if __name__ == "__main__":
    main()
