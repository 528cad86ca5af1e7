"""Measured runs as data: the dataset schema and files, the MLPerf import, and reading run rows
(`predict --input`, published tables) into configurations."""
