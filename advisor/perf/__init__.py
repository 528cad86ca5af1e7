"""Physical models: memory now; compute, communication, pipeline, power and thermal next."""
