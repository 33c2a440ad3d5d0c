"""Ground truth for pagecheck: float64 and mlx.core attention oracles, a pure-Python pool and cache."""
