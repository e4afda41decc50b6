"""The algorithm, runtime-free: sampling, the engine loop, KV bookkeeping, adaptive γ, events, metrics, theory."""
