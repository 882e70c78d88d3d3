"""GitHub itself: the REST gateway (transport, reads, checks, comments, Actions), how it is built, redaction."""
