"""The webhook service (`kv-parity serve`): its door, its threads, how it is served and what it is built from."""
