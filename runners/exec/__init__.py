"""Running what the protocol runs: the sandbox pull-request code starts in, its containment and CPU placement,
reading back what it wrote, one pinned harness process, and the cache of builds."""
