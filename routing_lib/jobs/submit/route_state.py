"""spark-submit entry file of the streaming job (`routectl run` flags), installed package."""

from routing_lib.cli import run_job

if __name__ == "__main__":
    run_job("route_state")
