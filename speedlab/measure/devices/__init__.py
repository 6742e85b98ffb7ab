"""Device clocks: how each kind of device times a step, one module per device."""
