"""Training the embedded draft model by distillation from the target (CPU, offline)."""
