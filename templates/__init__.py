"""The Jinja2 templates, installed as the package `kv_parity_templates` (pyproject.toml maps this directory)."""
