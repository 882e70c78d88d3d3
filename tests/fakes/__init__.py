"""In-process stand-ins for external services, served over real HTTP so clients run unmodified."""
