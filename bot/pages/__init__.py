"""The service's web pages over its store: a campaign's details, a pull request's campaigns, the queue, the default
branch's history; served only when `public_url` is set."""
