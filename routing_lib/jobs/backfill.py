"""The backfill (`routectl backfill`) as a spark-submit entry file of the installed package."""

from routing_lib.jobs import run

if __name__ == "__main__":
    run("backfill")
