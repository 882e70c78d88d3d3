"""kv-parity runners: the replay parity protocol, one module per stage."""

__version__ = "0.1.0"
