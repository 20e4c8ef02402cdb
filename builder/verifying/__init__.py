"""What makes a wheel good: its names, ABI, archs, machine, repair, torch pin, smoke test."""
