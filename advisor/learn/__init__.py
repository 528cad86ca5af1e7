"""Learned surrogates on top of the analytical model."""
