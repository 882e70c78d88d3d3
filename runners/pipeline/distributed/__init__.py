"""The campaign split across jobs and nodes: build once, run each row on its own node, merge into one report.

One import direction, bottom to top: `common` (names, exit codes, errors, file helpers) <- `artifacts` (the
manifest, row and fixtures results, the matrix) <- `staging` <- the jobs: `plan` <- `build` <- `manifest`,
`fixtures` <- `row`, and `merge`. No evidence is ever pooled across nodes.
"""
