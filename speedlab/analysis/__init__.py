"""What the measurements mean: the doctor's findings and the linter. Imports only
speedlab.results and speedlab.measure."""
