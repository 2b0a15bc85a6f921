"""`python -m routing_lib.cli ...`: routectl without the console script."""

from routing_lib.cli import entry

entry()
