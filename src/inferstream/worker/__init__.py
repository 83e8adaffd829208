"""The worker role: consume tasks, run the pipeline, commit results exactly once."""
