"""Privacy stage: calibration before training, accounting after it."""
