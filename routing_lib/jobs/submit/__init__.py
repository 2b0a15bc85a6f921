"""spark-submit entry files of the jobs (routing_lib/jobs), shipped in the wheel:
`spark-submit "$(routectl job-path route_state)" [routectl run flags]`. Each runs its job's
routectl subcommand, so spark-submit and routectl share one code path."""
