"""The small model and short trace every serving test runs on (built once per process)."""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.qwen3_weights import Qwen3Weights, random_qwen3_weights
from pagecheck.serving.request import Request

# Every shape the kernels and mx.quantize need (head_dim 32, groups of 64), and nothing more.
SERVING_CONFIG = Qwen3Config(
    "qwen3-test", hidden_size=64, num_layers=2, num_q_heads=4, num_kv_heads=2, intermediate_size=128,
    vocab_size=512, head_dim=32,
)
SERVING_GROUP_SIZE = 64
PAGE_SIZE = 4
PREFILL_STEP = 8
BATCH_SIZE = 3


@lru_cache(maxsize=None)
def serving_weights(num_layers: int = SERVING_CONFIG.num_layers) -> Qwen3Weights:
    config = SERVING_CONFIG.with_layers(num_layers)
    return random_qwen3_weights(config, seed=7, dtype=mx.float32, group_size=SERVING_GROUP_SIZE)


def serving_model(attention_path: str, num_layers: int = SERVING_CONFIG.num_layers) -> Qwen3Model:
    return Qwen3Model(serving_weights(num_layers), attention_path)


def short_trace(num_requests: int = 6, seed: int = 3) -> list[Request]:
    """Prompts of 1..2 pages up to several chunks, outputs that cross page boundaries; fresh objects."""
    rng = np.random.default_rng(seed)
    return [
        Request(
            rng.integers(0, SERVING_CONFIG.vocab_size, int(rng.integers(1, 3 * PREFILL_STEP))).tolist(),
            int(rng.integers(1, 3 * PAGE_SIZE)),
            request_id,
        )
        for request_id in range(num_requests)
    ]
