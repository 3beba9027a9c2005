"""One module per weight file format; each returns engine.loading.weights.LoadedWeights."""
