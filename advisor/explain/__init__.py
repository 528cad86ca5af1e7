"""Words and launch commands for a configuration: bottlenecks, rationale, and the emitters."""
