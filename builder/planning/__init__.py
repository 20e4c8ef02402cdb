"""matrix.toml to builds: cells, the compat rules, the plan and its GitHub matrix."""
