"""The Predictor: analytical model plus learned surrogates, vectorised over configurations."""
