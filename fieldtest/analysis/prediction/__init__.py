"""Stage 4, prediction: lap drift, closing error and watchdog stops predicted from a latency and loss
trace (``fieldtest predict``). Imports loading, metrics and causes."""
