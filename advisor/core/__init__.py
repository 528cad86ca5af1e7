"""The core types and rules: errors, models, platforms and their catalog readers, the parallel
configuration, its knobs, and the space of valid configurations. Imports nothing above it."""
