"""The contract and its rules: the campaign config, the versioned report, and the pure verdict rules a report is
judged by. Nothing here starts a process or reads pull-request output (tests/test_architecture.py)."""
