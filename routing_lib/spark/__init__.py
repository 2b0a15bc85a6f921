"""Spark edges: session, sources, the stateful step and the Delta writer."""
