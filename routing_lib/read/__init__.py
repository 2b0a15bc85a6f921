"""The read side: route tables from Delta with delta-rs, no JVM."""
