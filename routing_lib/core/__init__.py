"""The route state machine, pure Python: no Spark, no Delta, no I/O."""
