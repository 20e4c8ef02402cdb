"""A command's run over the stages: the plan's builds scheduled, built, verified, smoke-tested, indexed and timed;
a rebuild to compare; the HIP compile kept and recorded."""
