"""One module per protocol stage (pin, build, trace, determinism, canonical parity, coverage, exceptions,
lifecycles, sizes, instruction counts, attribution), and the doctor each row records."""
