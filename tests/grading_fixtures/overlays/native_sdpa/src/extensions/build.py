"""The overlay's extension build: one shared library, linked against the MLX it runs with, beside attention.py."""

import os
import subprocess

import mlx

MLX = mlx.__path__[0]
subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-o", "../tiny_llm/libkernel.so", "src/kernel.cpp",
                "-I", os.path.join(MLX, "include"), "-L", os.path.join(MLX, "lib"), "-lmlx",
                "-Wl,-rpath," + os.path.join(MLX, "lib")], check=True)  # fmt: skip
