"""Stage 6, rendering: the trial's plots (drawn in a forked worker), report.md, trajectory.csv, the
campaign page and figure, the Foxglove layout. Imports the stages before it.

Empty on purpose: ``fieldtest analyze`` imports ``rendering.plotprocess`` before it forks.
"""
