"""One module per weight file format; each returns engine.weights.LoadedWeights."""
