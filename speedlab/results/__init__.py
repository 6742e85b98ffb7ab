"""What a run measured: result objects, their comparison and the run history. Imports nothing
else of speedlab."""
