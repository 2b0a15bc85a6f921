"""spark-submit entry file of the backfill (`routectl backfill` flags), installed package."""

from routing_lib.cli import run_job

if __name__ == "__main__":
    run_job("backfill")
