"""The farm's run: images, executors, the schedule, and the build command driving every stage."""
