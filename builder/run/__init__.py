"""The build run over every stage: the plan's builds scheduled, built, verified, indexed and timed; a rebuild to compare."""
