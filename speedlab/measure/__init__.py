"""Measurement during training: the probe, worker stamps, host syncs, the system sampler and
the per-rank records. Imports only speedlab.results."""
