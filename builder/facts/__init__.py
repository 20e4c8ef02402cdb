"""What every stage reads: torch, toolkits and their data, a build's shape, this host's settings."""
