"""Stage 7, the performance gate: the seeded schedule, the exact statistics and the verdict from recorded
evidence (pure: `kv-parity verify` replays them), and the sampler that spawns the pinned processes."""
