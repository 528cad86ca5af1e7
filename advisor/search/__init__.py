"""Choosing configurations: objectives and constraints, the search engines, recommend, compare,
scheduler tables, the expert check and why-not answers."""
