"""The controller role: divide jobs into tasks, collect one result per task."""
