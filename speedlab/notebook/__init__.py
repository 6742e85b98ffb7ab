"""What a person sees: the magics, the panel, the live views and the charts. Imports every
layer below it."""
