"""Stage 3, drift causes: the lap drift attributed along plan -> send -> arrival -> motion with the
Create 3 model, stalls at segment changes, the base's calibration part of the rest, and the stack's
own timing faults and the trial's validity. Imports loading and metrics."""
