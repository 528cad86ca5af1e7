"""Built-in campaign templates (TOML data)."""
