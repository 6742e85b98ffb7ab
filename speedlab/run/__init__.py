"""Running a cell under the knobs: the knob table, interception of the user's Trainer and
loaders, preload, sweeps and autotune. Imports the layers below it."""
