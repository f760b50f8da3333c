#!/usr/bin/env python3
"""Fetches llama.cpp's tokenizer test suite for Aquila's tests.

The `llama-cpp-python` source package on PyPI vendors llama.cpp, whose `models/` folder holds
vocabulary-only GGUF files with test inputs and the token ids expected for them:

    OUT/ggml-vocab-NAME.gguf      the vocabulary
    OUT/ggml-vocab-NAME.gguf.inp  inputs, separated by lines `__ggml_vocab_test__`
    OUT/ggml-vocab-NAME.gguf.out  one line of space-separated ids per input

Only the named vocabularies are unpacked. pip needs scikit-build-core and CMake to read the
source package's metadata, so the script runs itself in a virtual environment at --venv with
them pinned, creating it on first use (needs pip and access to PyPI once). OUT is written
whole or not at all.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
MODELS_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
BUILD_REQUIREMENTS = ["scikit-build-core==1.1.2", "cmake==4.4.5"]


def in_venv(venv_dir: str) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv_dir)


def ensure_venv(venv_dir: str) -> str:
    """Creates the virtual environment with the pinned packages once; returns its python."""
    python = os.path.join(venv_dir, "bin", "python")
    marker = os.path.join(venv_dir, "aquila-" + "-".join(BUILD_REQUIREMENTS))
    if os.path.exists(marker):
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *BUILD_REQUIREMENTS],
        check=True,
    )
    open(marker, "w").close()
    return python


def member_names(vocabs: list[str]) -> set[str]:
    return {
        f"{MODELS_DIR}ggml-vocab-{name}.gguf{suffix}"
        for name in vocabs
        for suffix in ("", ".inp", ".out")
    }


def fetch(out_dir: str, vocabs: list[str]) -> None:
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent) as work:
        download = os.path.join(work, "download")
        bin_dir = os.path.dirname(sys.executable)
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-binary", ":all:", "--no-build-isolation", LLAMA_CPP_PYTHON,
             "-d", download],
            check=True,
            env=env,
        )
        wanted = member_names(vocabs)
        staged = os.path.join(work, "vocab")
        os.makedirs(staged)
        with tarfile.open(os.path.join(download, SDIST)) as sdist:
            for member in sdist:
                if member.name in wanted and member.isfile():
                    source = sdist.extractfile(member)
                    target = os.path.join(staged, os.path.basename(member.name))
                    with open(target, "wb") as f:
                        shutil.copyfileobj(source, f)
                    wanted.discard(member.name)
        if wanted:
            sys.exit(f"{SDIST} lacks {sorted(wanted)}")
        # A folder from a run that unpacked other vocabularies is replaced.
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir, ignore_errors=True)
        try:
            os.rename(staged, out_dir)
        except OSError:
            if not os.path.isdir(out_dir):
                raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, help="virtual environment directory")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("vocabs", nargs="+", help="vocabulary names, e.g. llama-spm")
    args = parser.parse_args()
    present = all(os.path.exists(m) for m in (
        os.path.join(args.out, os.path.basename(name)) for name in member_names(args.vocabs)))
    if present:
        return
    if not in_venv(args.venv):
        python = ensure_venv(args.venv)
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])
    fetch(args.out, args.vocabs)


if __name__ == "__main__":
    main()
