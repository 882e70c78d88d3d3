"""kv-parity-bot: GitHub side."""
