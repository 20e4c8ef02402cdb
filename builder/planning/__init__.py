"""matrix.toml and recipes/*.toml to builds: the cells, what a recipe says for one, the plan."""
