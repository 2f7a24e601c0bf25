"""Stage 5, campaign: many trials side by side (``fieldtest compare``'s rows and tables), intervals,
statistical power, UMBmark and the base's calibration per robot. Imports the stages before it."""
